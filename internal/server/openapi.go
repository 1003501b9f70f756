package server

import (
	_ "embed"
	"net/http"
)

// openAPIDocument is the OpenAPI 3.1 description of this API, generated
// from the route table and api/v1's wire types by openapi_gen_test.go
// (go test ./internal/server -run TestOpenAPIDocument -update), which also
// keeps docs/openapi.json the same bytes.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns the OpenAPI 3.1 document served at
// GET /openapi.json.
func OpenAPIDocument() []byte { return append([]byte(nil), openAPIDocument...) }

// serveOpenAPI answers GET /openapi.json. Like every route but health it
// wants a token: see docs/security.md.
func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
	return nil
}
