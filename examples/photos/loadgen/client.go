package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// client calls the photo API and records every request in the stats.
type client struct {
	base  string
	http  *http.Client
	stats *stats
}

// StatusError is an HTTP error answer of the photo API.
type StatusError struct {
	Op     string
	Status int
	Body   string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("loadgen: %s: HTTP %d: %s", e.Op, e.Status, e.Body)
}

// call sends one request; out, when not nil, receives the JSON answer.
// Expected statuses other than 2xx (like 409 for a repeated like) are
// listed in ok and are not errors.
func (c *client) call(ctx context.Context, op, method, path string, in, out any, ok ...int) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // the run ended: not a request error
		}
		c.stats.record(op, time.Since(start), err)
		return err
	}
	defer resp.Body.Close()
	data, rerr := io.ReadAll(resp.Body)
	d := time.Since(start)
	if rerr != nil {
		if ctx.Err() != nil {
			return ctx.Err() // the run ended while the answer was read
		}
		c.stats.record(op, d, rerr)
		return rerr
	}
	if resp.StatusCode/100 != 2 {
		for _, s := range ok {
			if resp.StatusCode == s {
				c.stats.record(op, d, nil)
				return &StatusError{Op: op, Status: resp.StatusCode, Body: string(bytes.TrimSpace(data))}
			}
		}
		err := &StatusError{Op: op, Status: resp.StatusCode, Body: string(bytes.TrimSpace(data))}
		c.stats.record(op, d, err)
		return err
	}
	c.stats.record(op, d, nil)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("loadgen: %s: decode answer: %w", op, err)
		}
	}
	return nil
}
