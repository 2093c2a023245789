package metrics

import (
	"fmt"
	"time"

	"gorm.io/gorm"
)

const startKey = "photos:metrics_start"

// ServerOf names the physical server a finished statement ran on; "" when
// unknown (for example a statement refused before routing).
type ServerOf func(*gorm.Statement) string

// InstrumentGORM registers a callback pair around each of GORM's
// processors: the first callback of each kind records the start time, the
// last observes the latency under the server serverOf names.
func (m *Metrics) InstrumentGORM(db *gorm.DB, serverOf ServerOf) error {
	cb := db.Callback()
	kinds := []struct {
		kind     string
		before func(name string, fn func(*gorm.DB)) error
		after  func(name string, fn func(*gorm.DB)) error
	}{
		{"create", func(n string, f func(*gorm.DB)) error { return cb.Create().Before("*").Register(n, f) },
			func(n string, f func(*gorm.DB)) error { return cb.Create().After("*").Register(n, f) }},
		{"query", func(n string, f func(*gorm.DB)) error { return cb.Query().Before("*").Register(n, f) },
			func(n string, f func(*gorm.DB)) error { return cb.Query().After("*").Register(n, f) }},
		{"update", func(n string, f func(*gorm.DB)) error { return cb.Update().Before("*").Register(n, f) },
			func(n string, f func(*gorm.DB)) error { return cb.Update().After("*").Register(n, f) }},
		{"delete", func(n string, f func(*gorm.DB)) error { return cb.Delete().Before("*").Register(n, f) },
			func(n string, f func(*gorm.DB)) error { return cb.Delete().After("*").Register(n, f) }},
		{"row", func(n string, f func(*gorm.DB)) error { return cb.Row().Before("*").Register(n, f) },
			func(n string, f func(*gorm.DB)) error { return cb.Row().After("*").Register(n, f) }},
		{"raw", func(n string, f func(*gorm.DB)) error { return cb.Raw().Before("*").Register(n, f) },
			func(n string, f func(*gorm.DB)) error { return cb.Raw().After("*").Register(n, f) }},
	}
	for _, k := range kinds {
		if err := k.before("photos:metrics_start_"+k.kind, start); err != nil {
			return fmt.Errorf("photos: register metrics callback: %w", err)
		}
		if err := k.after("photos:metrics_end_"+k.kind, m.end(k.kind, serverOf)); err != nil {
			return fmt.Errorf("photos: register metrics callback: %w", err)
		}
	}
	return nil
}

func start(db *gorm.DB) {
	db.Statement.Settings.Store(startKey, time.Now())
}

func (m *Metrics) end(kind string, serverOf ServerOf) func(*gorm.DB) {
	return func(db *gorm.DB) {
		v, ok := db.Statement.Settings.Load(startKey)
		if !ok {
			return
		}
		t, _ := v.(time.Time)
		server := ""
		if serverOf != nil {
			server = serverOf(db.Statement)
		}
		if server == "" {
			server = "unknown"
		}
		m.statements.WithLabelValues(server, kind).Inc()
		m.stmtTime.WithLabelValues(server, kind).Observe(time.Since(t).Seconds())
		if db.Error != nil {
			m.stmtErrors.WithLabelValues(server, kind).Inc()
		}
	}
}
