package rebalance

import (
	"strings"
	"testing"
	"time"
)

// TestSlotWaitSQL: the slot name and position are checked before they are
// written into the statement, which must never carry anything else.
func TestSlotWaitSQL(t *testing.T) {
	for _, c := range []struct {
		slot, lsn string
		ok        bool
	}{
		{"shardkit_fwd_0_1", "0/14D0C0D0", true},
		{"shardkit_rev_1999_42", "1A/0", true},
		{"", "0/0", false},
		{"Shardkit", "0/0", false},
		{"shardkit_fwd_0_1'; DROP TABLE x; --", "0/0", false},
		{"shardkit_fwd_0_1", "0/0'; SELECT 1; --", false},
		{"shardkit_fwd_0_1", "0/14d0c0d0", false},
		{"shardkit_fwd_0_1", "$shardkit$", false},
		{"shardkit_fwd_0_1", "", false},
		{strings.Repeat("a", 64), "0/0", false},
	} {
		sql, err := slotWaitSQL(c.slot, c.lsn, 1500*time.Millisecond)
		if (err == nil) != c.ok {
			t.Errorf("slotWaitSQL(%q, %q): err = %v, want ok %v", c.slot, c.lsn, err, c.ok)
			continue
		}
		if !c.ok {
			continue
		}
		for _, want := range []string{"'" + c.slot + "'", "'" + c.lsn + "'::pg_lsn", "1500 / 1000.0", slotWaitSQLState} {
			if !strings.Contains(sql, want) {
				t.Errorf("slotWaitSQL(%q, %q) lacks %q:\n%s", c.slot, c.lsn, want, sql)
			}
		}
		if strings.Count(sql, "$shardkit$") != 2 {
			t.Errorf("slotWaitSQL(%q, %q): the body is not one dollar-quoted string:\n%s", c.slot, c.lsn, sql)
		}
	}
}
