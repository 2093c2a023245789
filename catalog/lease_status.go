package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SlotLease is one row of the catalog's slot leases, for operators.
type SlotLease struct {
	Slot      int        `json:"slot"`
	Bits      int        `json:"bits"`                 // low sequence bits the lease fixes: the layout's slot bits for a whole slot
	Holder    string     `json:"holder,omitempty"`     // empty: free
	ExpiresAt *time.Time `json:"expires_at,omitempty"` // catalog clock
	LeasedAt  *time.Time `json:"leased_at,omitempty"`
	HWMMs     int64      `json:"hwm_ms"` // no earlier holder's IDs have a later unix ms
	Live      bool       `json:"live"`   // held and not expired, by the catalog's clock
}

// listSlotLeasesSQL reads every slot lease with its liveness on the catalog's clock.
const listSlotLeasesSQL = `SELECT slot, bits, coalesce(holder, ''), expires_at, leased_at, hwm_ms,
    holder IS NOT NULL AND expires_at > clock_timestamp()
FROM shardkit.slot_leases ORDER BY bits, slot`

// SlotLeases lists the ID slots that have been leased at least once.
func (c *Catalog) SlotLeases(ctx context.Context) ([]SlotLease, error) {
	rows, err := c.pool.Query(ctx, listSlotLeasesSQL)
	if err != nil {
		if isUndefinedTable(err) {
			return nil, fmt.Errorf("shardkit: %w", ErrNoCatalog)
		}
		return nil, fmt.Errorf("shardkit: list slot leases: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (SlotLease, error) {
		var s SlotLease
		err := r.Scan(&s.Slot, &s.Bits, &s.Holder, &s.ExpiresAt, &s.LeasedAt, &s.HWMMs, &s.Live)
		return s, err
	})
}
