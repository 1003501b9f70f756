package server

import (
	"context"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/google/uuid"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/auth"
	"kiln.dev/kiln/internal/httpstatus"
	"kiln.dev/kiln/internal/store"
	"kiln.dev/kiln/internal/validate"
)

// The middleware, outermost first:
//
//	requestID → logRequests → metrics → recoverPanics → headers   (around the mux)
//	validateURL → limitBody → authenticate → rateLimit          (around each route)
//
// The second group runs after routing because it needs the route's path
// values and whether the route is public; 404 and 405 are answered by
// route() between the two groups.

// reqInfo is what middleware learns about a request as it goes inward and
// what the outer middleware reads after the handler returns.
type reqInfo struct {
	id        string
	pattern   string
	principal auth.Principal
	project   string // the project the request acts in, once authorized
	role      string // the principal's role there (InProject routes), once authorized
	// operation is the operation authorization read (routes of an
	// operation): the handler's first read, saved.
	operation *store.Operation
	// audited: the handler recorded the request's audit entry with the
	// change it made (Server.begin).
	audited bool
}

type infoKey struct{}

func info(ctx context.Context) *reqInfo {
	if ri, ok := ctx.Value(infoKey{}).(*reqInfo); ok {
		return ri
	}
	return &reqInfo{}
}

func requestID(ctx context.Context) string { return info(ctx).id }

// MaxBodyBytes is the largest request body accepted.
const MaxBodyBytes = 1 << 20

// validRequestID accepts ids a client may choose: 1-128 characters of
// letters, digits and - _ . :
func validRequestID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

func (s *Server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			id = uuid.NewString()
		}
		w.Header().Set("X-Request-Id", id)
		ri := &reqInfo{id: id}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), infoKey{}, ri)))
	})
}

// logRequests logs one line per request: never the body, the query or
// the Authorization header.
// slowRequest is how long a read may take before its request line is
// logged at Info anyway.
const slowRequest = time.Second

func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.now()
		sw := &httpstatus.Recorder{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		ri := info(r.Context())
		took := s.now().Sub(start)
		level := slog.LevelInfo
		switch {
		case sw.Status() >= 500:
			level = slog.LevelError
		case sw.Status() == StatusClientClosedRequest:
			// Nobody was waiting for the answer (a closed page's stream).
			level = slog.LevelDebug
		case (r.Method == http.MethodGet || r.Method == http.MethodHead) && sw.Status() < 400 && took < slowRequest:
			// Reads that went well are most requests (every long-poll
			// answer); they are counted in /metrics, and logged with
			// --log-level debug. Writes are audited too.
			level = slog.LevelDebug
		}
		if !s.log.Enabled(r.Context(), level) {
			return
		}
		s.log.LogAttrs(r.Context(), level, "request",
			slog.String("method", r.Method),
			slog.String("route", routeLabel(ri)),
			slog.Int("status", sw.Status()),
			slog.Duration("duration", took),
			slog.String("requestId", ri.id),
			slog.String("principal", ri.principal.Name),
		)
	})
}

func routeLabel(ri *reqInfo) string {
	if ri.pattern == "" {
		return "unmatched"
	}
	return ri.pattern
}

func (s *Server) metrics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &httpstatus.Recorder{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		route := routeLabel(info(r.Context()))
		code := strconv.Itoa(sw.Status())
		s.m.requests.WithLabelValues(r.Method, route, code).Inc()
		s.m.duration.WithLabelValues(r.Method, route, code).Observe(time.Since(start).Seconds())
	})
}

// recoverPanics turns a panic into a 500 that names only the request id;
// the stack goes to the log.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &httpstatus.Recorder{ResponseWriter: w}
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p)
			}
			id := requestID(r.Context())
			s.log.ErrorContext(r.Context(), "handler panicked",
				slog.String("requestId", id), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			if !sw.Written() {
				errorBody(sw, http.StatusInternalServerError, v1.CodeInternal, "",
					fmt.Sprintf("an internal error occurred (request id %s)", id))
			}
		}()
		next.ServeHTTP(sw, r)
	})
}

func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// nameSegments are the path wildcards that hold names, and the role each
// is reported as.
var nameSegments = []string{"project", "cluster", "node", "operation", "cloudaccount", "profile",
	"user", "member", "serviceaccount", "secret"}

// validateURL checks every name in the path is a lower-case DNS label.
func validateURL(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, role := range nameSegments {
			v := r.PathValue(role)
			if v == "" {
				continue
			}
			if !validate.IsDNSLabel(v, validate.MaxLabel) {
				errorBody(w, http.StatusBadRequest, v1.CodeInvalidParameter, role,
					fmt.Sprintf("the %s name %q must be a lower-case DNS-1123 label of at most %d characters", role, v, validate.MaxLabel))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// limitBody caps bodies at MaxBodyBytes and refuses bodies that are not
// JSON. A missing Content-Type is taken as JSON.
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > MaxBodyBytes {
			errorBody(w, http.StatusRequestEntityTooLarge, v1.CodeRequestTooLarge, "",
				fmt.Sprintf("the request body is larger than %d bytes", MaxBodyBytes))
			return
		}
		if hasBody(r) {
			if ct := r.Header.Get("Content-Type"); ct != "" {
				mt, _, err := mime.ParseMediaType(ct)
				ok := err == nil && (mt == "application/json" ||
					(mt == "application/merge-patch+json" && r.Method == http.MethodPatch))
				if !ok {
					errorBody(w, http.StatusUnsupportedMediaType, v1.CodeUnsupportedMedia, "Content-Type",
						fmt.Sprintf("Content-Type %q is not accepted; send application/json (or application/merge-patch+json with PATCH)", ct))
					return
				}
			}
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

func (s *Server) rateLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.limiter != nil {
			if wait := s.limiter.take(info(r.Context()).principal.TokenID); wait > 0 {
				secs := int((wait + time.Second - 1) / time.Second)
				w.Header().Set("Retry-After", strconv.Itoa(secs))
				errorBody(w, http.StatusTooManyRequests, v1.CodeThrottled, "",
					fmt.Sprintf("too many requests; retry after %d s", secs))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
