package backup_test

import (
	"context"
	"fmt"
	"os"

	"github.com/shardkit/shardkit/backup"
	"github.com/shardkit/shardkit/catalog"
)

// Dump writes one logical shard to a file while writes go on; Restore
// checks it against the dump's checksums, into a scratch database for
// inspection or, confirmed, over the shard's home. This example needs
// live databases and the PostgreSQL client tools, so it is compiled but
// not run (no Output line).
func Example() {
	ctx := context.Background()
	cat, err := catalog.Open(ctx, "postgres://catalog-host/shardkit")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cat.Close()

	f, err := os.Create("shard_1341.dump")
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := backup.Dump(ctx, cat, 1341, f, backup.DumpOptions{})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("dumped", m.Schema, "as of", m.TakenAt)

	in, err := os.Open("shard_1341.dump")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer in.Close()
	res, err := backup.Restore(ctx, cat, in, backup.RestoreOptions{Into: "postgres://scratch-host/inspect"})
	if err != nil {
		fmt.Println(err) // backup.ErrChecksumMismatch: nothing was changed
		return
	}
	fmt.Println("restored; id_seq at", res.IDSeq)
}
