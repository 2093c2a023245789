package metrics

import (
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/shardkit/shardkit/plugin"
)

// InstrumentGORM installs the shardkit telemetry on db, which must already
// use the shardkit plugin: statements, errors, latencies and fence waits
// per physical server, server health, map version and ID slot lease on
// the registry, and a span per routed statement from OpenTelemetry's
// global tracer provider (a no-op until the program installs an SDK).
// It also keeps the longest fence wait for the demo's summary.
func (m *Metrics) InstrumentGORM(db *gorm.DB) error {
	if err := db.Use(m.tel); err != nil {
		return fmt.Errorf("photos: install the shardkit telemetry: %w", err)
	}
	cb := db.Callback()
	regs := []struct {
		name string
		err  error
	}{
		{"create", cb.Create().After("shardkit:route").Before("gorm:create").Register("photos:fence_wait", m.fenceWait)},
		{"update", cb.Update().After("shardkit:route").Before("gorm:update").Register("photos:fence_wait", m.fenceWait)},
		{"delete", cb.Delete().After("shardkit:route").Before("gorm:delete").Register("photos:fence_wait", m.fenceWait)},
	}
	for _, r := range regs {
		if r.err != nil {
			return fmt.Errorf("photos: register the %s fence wait callback: %w", r.name, r.err)
		}
	}
	return nil
}

// fenceWait keeps the longest time a write waited on a fenced shard.
func (m *Metrics) fenceWait(db *gorm.DB) {
	if info, ok := plugin.Routed(db.Statement); ok && info.FenceWait > 0 {
		m.observeFenceWait(info.FenceWait)
	}
}

func (m *Metrics) observeFenceWait(d time.Duration) {
	for {
		cur := m.fenceMax.Load()
		if int64(d) <= cur || m.fenceMax.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}
