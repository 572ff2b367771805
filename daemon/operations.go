package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/strictjson"
	"github.com/chalupa-run/chalupa/storage"
)

// apiError is a refusal an operation handler returns: the status and the
// error body's code and message. The message must be safe to show: no SQL
// text, key material, tokens, URLs or fleet data. Any other error a handler
// returns is logged and answered as a redacted 500.
type apiError struct {
	status        int
	code, message string
	// jobID is the error body's jobId (a busy converge scope), "" for none.
	jobID string
}

// Error is "code: message".
func (e *apiError) Error() string { return e.code + ": " + e.message }

// fail returns an *apiError.
func fail(status int, code, message string) error {
	return &apiError{status: status, code: code, message: message}
}

// none is the request type of an operation without a body.
type none = struct{}

// boundOp is one operation with its type-erased handler.
type boundOp struct {
	op adminapi.Operation
	// hasBody is op.HasBody(): the route reads and decodes a body.
	hasBody bool
	// decode builds the operation's request from the body (strict
	// rules; nil when hasBody is false) and the path and query
	// parameters; nil for an operation without a request type.
	decode func(body []byte, pathParam func(string) string, query url.Values) (any, error)
	// call runs the handler on a decoded request.
	call func(ctx context.Context, req any) (any, error)
}

// operations is the registry of admin operation handlers, keyed by
// operationId (Tailscale's localapi.Register: a duplicate panics).
type operations struct {
	byID map[string]boundOp
}

func newOperations() *operations { return &operations{byID: map[string]boundOp{}} }

// handleOp registers fn as the handler of operation id. It panics when id
// is not in adminapi.Operations, is registered twice, or when Req or Resp
// differ from the types the table gives the operation (Req is none for an
// operation without a body): the table and the handlers cannot drift apart.
func handleOp[Req, Resp any](o *operations, id string, fn func(ctx context.Context, req Req) (Resp, error)) {
	op, ok := adminapi.Lookup(id)
	if !ok {
		panic(fmt.Sprintf("daemon: handler for unknown operation %q", id))
	}
	if _, dup := o.byID[id]; dup {
		panic(fmt.Sprintf("daemon: operation %s registered twice", id))
	}
	reqType, respType := reflect.TypeFor[Req](), reflect.TypeFor[Resp]()
	if (op.Request == nil && reqType != reflect.TypeFor[none]()) || (op.Request != nil && op.Request != reqType) {
		panic(fmt.Sprintf("daemon: %s handler takes %v; the table says %v", id, reqType, op.Request))
	}
	if op.Response != respType {
		panic(fmt.Sprintf("daemon: %s handler returns %v; the table says %v", id, respType, op.Response))
	}
	b := boundOp{op: op, hasBody: op.HasBody(), call: func(ctx context.Context, req any) (any, error) { return fn(ctx, req.(Req)) }}
	if op.Request != nil {
		b.decode = func(body []byte, pathParam func(string) string, query url.Values) (any, error) {
			var req Req
			if b.hasBody {
				if err := strictjson.Decode(body, &req); err != nil { // the rules every endpoint shares
					return nil, err
				}
			}
			if err := adminapi.DecodeParams(op, &req, pathParam, query); err != nil {
				return nil, err
			}
			return req, nil
		}
	}
	o.byID[id] = b
}

// complete reports every operation of the table without a handler. The
// daemon refuses to start on it: a missing handler would otherwise be a
// silent 404.
func (o *operations) complete() error {
	var missing []string
	for _, op := range adminapi.Operations {
		if _, ok := o.byID[op.ID]; !ok {
			missing = append(missing, op.ID)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("admin operations without a handler: %s", strings.Join(missing, ", "))
	}
	return nil
}

// opRoute is one route and the operations it serves (several when the
// body's action selects among them).
type opRoute struct {
	method, path string
	ops          []boundOp
}

// routes groups the registered operations by route, in table order.
func (o *operations) routes() []opRoute {
	var out []opRoute
	index := map[string]int{}
	for _, op := range adminapi.Operations {
		key := op.Method + " " + op.Path
		i, ok := index[key]
		if !ok {
			i = len(out)
			index[key] = i
			out = append(out, opRoute{method: op.Method, path: op.Path})
		}
		out[i].ops = append(out[i].ops, o.byID[op.ID])
	}
	return out
}

// serve returns the HTTP handler of one route: it reads and strictly
// decodes the body (64 KiB at most) and the path and query parameters,
// picks the operation (by the body's action when several share the
// route), runs it and writes its answer with the operation's success
// status. A body that does not decode is 400 bad_body; a query parameter
// the operation does not take, a repeated one, or a parameter value that
// does not parse is 422 bad_param, whose message never repeats the value;
// a parameter value that breaks its `schema` tag is refused with its
// `refuse` tag's status and code (checkParams).
func (o *operations) serve(s *Server, rt opRoute) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b := rt.ops[0]
		var req any = none{}
		query, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeError(w, http.StatusUnprocessableEntity, "bad_param", "the query string is malformed")
			return
		}
		if !refuseZeroRecent(w, b.op.ID, query) {
			return
		}
		if b.decode == nil {
			// No parameters: any query parameter is unknown.
			if err := adminapi.DecodeParams(b.op, nil, nil, query); err != nil {
				writeError(w, http.StatusUnprocessableEntity, "bad_param", err.Error())
				return
			}
		} else {
			var body []byte
			if b.hasBody {
				var ok bool
				if body, ok = readAdminBody(w, r); !ok {
					return
				}
			}
			if len(rt.ops) > 1 {
				// The action picks the operation first: each decodes the
				// body strictly as its own type (adminapi, the ingest-key
				// bodies).
				picked, ok := pickByAction(rt, body)
				if !ok {
					writeError(w, http.StatusBadRequest, "bad_action", actionHint(rt))
					return
				}
				b = picked
			}
			params := httprouter.ParamsFromContext(r.Context())
			if req, err = b.decode(body, params.ByName, query); err != nil {
				var pe *adminapi.ParamError
				if errors.As(err, &pe) {
					writeError(w, http.StatusUnprocessableEntity, "bad_param", pe.Error())
				} else {
					writeError(w, http.StatusBadRequest, "bad_body", err.Error())
				}
				return
			}
			if ae := (*apiError)(nil); errors.As(checkParams(req), &ae) {
				// The rules the document's parameter schema states
				// (docs/operations.md, "OpenAPI").
				writeError(w, ae.status, ae.code, ae.message)
				return
			}
		}
		if b.op.Bound > 0 {
			// A long operation: the server's write timeout would cut its
			// answer (adminapi.Operation.Bound).
			if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(b.op.Bound)); err != nil {
				s.log.Warn().Err(err).Str("operation", b.op.ID).Msg("cannot extend the write deadline")
			}
		}
		resp, err := b.call(r.Context(), req)
		var ae *apiError
		switch {
		case errors.As(err, &ae) && ae.jobID != "":
			writeJSON(w, ae.status, adminapi.ErrorBody{Error: adminapi.ErrorDetail{Code: ae.code, Message: ae.message, JobID: ae.jobID}})
		case errors.As(err, &ae):
			writeError(w, ae.status, ae.code, ae.message)
		case err != nil:
			s.internal(w, b.op.ID, err)
		default:
			writeJSON(w, b.op.Status, resp)
		}
	}
}

// pickByAction returns the operation of rt that body's action selects
// (adminapi.ForAction). A body whose action cannot be read as a string
// (malformed JSON, a number) goes to the default operation, whose strict
// decode refuses it as 400 bad_body.
func pickByAction(rt opRoute, body []byte) (boundOp, bool) {
	var peek struct {
		Action json.RawMessage `json:"action"`
	}
	var action string
	if json.Unmarshal(body, &peek) != nil || (len(peek.Action) > 0 && json.Unmarshal(peek.Action, &action) != nil) {
		action = ""
	}
	op, ok := adminapi.ForAction(rt.method, rt.path, action)
	if !ok {
		return boundOp{}, false
	}
	for _, b := range rt.ops {
		if b.op.ID == op.ID {
			return b, true
		}
	}
	return boundOp{}, false
}

// actionHint is the bad_action message: the actions rt takes.
func actionHint(rt opRoute) string {
	var names []string
	for _, b := range rt.ops {
		if b.op.Action != "" {
			names = append(names, fmt.Sprintf("%q", b.op.Action))
		}
	}
	sort.Strings(names)
	return fmt.Sprintf("action must be %s (omit it to issue)", strings.Join(names, " or "))
}

// internal logs err server-side (it may hold SQL text) and answers a
// redacted 500.
//
// A storage fault (disk full, I/O error, read-only file system:
// storage.FaultKind) is answered 503 storage_unavailable with Retry-After
// instead, logged with its kind only (docs/operations.md, "HTTP surface and
// errors").
func (s *Server) internal(w http.ResponseWriter, op string, err error) {
	if kind := storage.FaultKind(err); kind != "" {
		s.log.Warn().Str("request_id", w.Header().Get("X-Request-Id")).Str("op", op).Str("fault", kind).Msg("request failed: storage unavailable")
		writeStorageUnavailable(w)
		return
	}
	s.log.Error().Str("request_id", w.Header().Get("X-Request-Id")).Str("op", op).Err(err).Msg("request failed")
	writeError(w, http.StatusInternalServerError, "internal", "internal error")
}
