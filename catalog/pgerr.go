package catalog

import "github.com/shardkit/shardkit/internal/catalogmove"

// isUndefinedTable reports an error of a catalog never provisioned.
func isUndefinedTable(err error) bool { return catalogmove.UndefinedTable(err) }
