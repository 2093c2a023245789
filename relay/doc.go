// Package relay serves a catalog's shard map to the routers of one host,
// so that the catalog's load grows with hosts, not with processes.
//
// A router keeps its map current by polling the catalog (a version check
// every half second, shared by the routers of one process) or by holding
// a LISTEN connection. Either way the catalog pays for every process: a
// thousand processes polling make two thousand version checks a second,
// and a thousand listening hold a thousand backends. A relay is one
// process per host (`shardctl relay`) that listens to the catalog on one
// connection and answers the host's routers over a Unix socket: they wait
// on it for the next version (a long poll) and read from it only the
// placements that changed. A map change then costs the catalog one
// notification and one read per relay, and reaches a router one local
// round trip after the relay has it.
//
//	c, err := relay.DialWith("/run/shardkit/relay.sock", relay.Options{Catalog: cat})
//	if err != nil {
//		return err
//	}
//	r, err := router.New(ctx, c)
//	if err != nil {
//		return err // relay.ErrUnavailable: no relay at that path
//	}
//	go r.WatchWith(ctx, router.WatchOptions{Listen: true})
//
// The relay is an optimisation of freshness, not of correctness: a router
// on an old map is refused by the old home's barrier and reloads, as it
// would with any other source. A router whose relay is down keeps the map
// it has and waits on the relay again with backoff; run the relay under
// the host's service manager.
//
// The relay is not trusted with the map either. Every reply carries its
// catalog's identity (catalog.Stamp.ID); a client given its catalog
// (Options.Catalog, opened with the application's DSN) reads the
// catalog's stamp before it takes a version it has not seen the catalog
// hold, or servers other than those it last checked, and refuses a map
// of another catalog (ErrOtherCatalog), of a version the catalog does not
// hold (ErrVersionAhead) or naming a server's DSN, replicas or primary
// otherwise (ErrServersDiffer), before decoding its placements. A map
// change costs each client one such read.
//
// The socket carries the servers' DSNs, which may hold passwords: Listen
// makes it readable and writable by its owner only (mode 0600) and serves
// only peers of allowed uids. On TCP (ListenTCP) a relay requires a token,
// client certificates, or both.
package relay
