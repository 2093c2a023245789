package store

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"
)

// Errors the API maps to HTTP statuses. Test with errors.Is.
var (
	// ErrNotFound reports a user or photo that does not exist.
	ErrNotFound = errors.New("photos: not found")
	// ErrConflict reports a like or follow that already exists.
	ErrConflict = errors.New("photos: already exists")
	// ErrInvalid reports a request the store refuses (empty name, self-follow…).
	ErrInvalid = errors.New("photos: invalid request")
)

func isNotFound(err error) bool { return errors.Is(err, gorm.ErrRecordNotFound) }

// isUniqueViolation reports a duplicate key (SQLSTATE 23505).
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
