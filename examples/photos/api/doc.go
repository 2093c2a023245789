// Package api serves the photo service over HTTP: the JSON API, the admin
// page (embedded HTML and JavaScript, no build step), /healthz and
// /metrics. IDs travel as JSON strings: 63-bit numbers do not fit a
// JavaScript number.
//
//	POST /users                    {"name"}                 → 201 user
//	GET  /users/{id}                                        → user
//	POST /users/{id}/photos        {"url","caption",…}      → 201 photo
//	GET  /users/{id}/photos?before=ID&limit=N               → page of photos, newest first
//	GET  /photos/{id}                                       → photo
//	POST /photos/{id}/likes        {"user_id"}              → 201 like (409 if repeated)
//	GET  /photos/{id}/likes?before=ID&limit=N               → page of likes
//	POST /users/{id}/follows       {"followee_id"}          → 201 follow (409 if repeated)
//	GET  /users/{id}/following                              → followee IDs
//	GET  /users/{id}/feed?before=ID&limit=N                 → followees' photos, newest first
//	GET  /admin                                             → admin page
//
// Wire it with ProviderSet, or by hand:
//
//	mux := http.NewServeMux()
//	api.NewAPI(st, log).Register(mux)
package api
