// Package twophase names shardkit's prepared transactions. A global
// transaction identifier (GID) says which server's local transaction holds
// the commit decision and that transaction's ID, so that a resolver can
// finish any prepared part from the GID alone:
//
//	shardkit:v1:<coordinator>:<xid>:<nonce>[:<part>]
//
//	d := twophase.Decision{Coordinator: "a", XID: 1234, Nonce: "9f86d081884c7d65"}
//	g := d.Part(1)                             // the GID prepared on the second participant
//	sql := "PREPARE TRANSACTION " + g.Literal() // a string literal, not a bind parameter
//	back, err := twophase.Parse(g.String())     // back == g
//
// PREPARE TRANSACTION and COMMIT PREPARED take their GID as a string
// literal, so a GID is built only from validated parts (a server name as
// the catalog allows it, an integer, hex digits) and quoted by Literal.
package twophase
