package adminapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"time"
)

// Operation is one admin API operation: the unit the daemon registers a
// handler for, the client calls, the CLI exposes, and (later) the MCP tools
// and the OpenAPI document describe.
type Operation struct {
	// ID is the operationId, e.g. "adminCreateEnvironment". The client
	// method is ID without its "admin" prefix (CreateEnvironment).
	ID string
	// Method and Path locate it; Path uses httprouter syntax (":name").
	Method, Path string
	// Summary is a one-line description for `chalupa admin api --list`.
	Summary string
	// Request is the request's type: its fields tagged path or query are
	// the path and query parameters (params.go), the others the JSON body.
	// nil for an operation that takes neither; a GET takes parameters only.
	Request reflect.Type
	// Response is the success body's type.
	Response reflect.Type
	// Status is the HTTP status of a success (200, or 201 for a creation).
	Status int
	// Mutates is true when the operation writes: the CLI and MCP treat such
	// operations as actions that need the operator's intent, and reads as
	// safe to repeat.
	Mutates bool
	// Action, for operations that share one route, is the body's "action"
	// value that selects this one ("" for the operation taken when the body
	// names none). Empty for operations with a route of their own.
	Action string
	// MCP is how `chalupa mcp` exposes the operation; every operation has
	// one (the accounting test checks it).
	MCP MCPPolicy
	// Bound, when non-zero, is the least time one call may take: the
	// daemon extends the answer's write deadline to it (its server's
	// default is 60 s) and Client.Call waits at least as long, whatever
	// its HTTP client's timeout. 0 for the calls that answer at once.
	Bound time.Duration
}

// MCPAccess is how the MCP server exposes an operation (docs/operations.md,
// "MCP server").
type MCPAccess string

// MCP accesses.
const (
	// MCPRead: exposed, annotated read-only; only for operations that do
	// not mutate.
	MCPRead MCPAccess = "read"
	// MCPMutate: exposed as an ordinary tool.
	MCPMutate MCPAccess = "mutate"
	// MCPDestructive: exposed, annotated destructive; a call must carry
	// `confirm` holding the policy's phrase, else it is refused before the
	// daemon is called.
	MCPDestructive MCPAccess = "destructive"
	// MCPNever: not exposed. Every operation that sets or returns a secret
	// (console password, provider tokens, ingest keys) is never.
	MCPNever MCPAccess = "never"
)

// MCPPolicy is one operation's MCP exposure.
type MCPPolicy struct {
	Access MCPAccess
	// Tool is the tool's name when it is not the one derived from the id
	// (chalupa_admin_<id without "admin", snake_case>): the converge
	// tools keep their established names, which MCP clients already call.
	Tool string
	// Confirm, for MCPDestructive only, is the phrase template the call's
	// `confirm` must equal once each {name} is replaced by that argument
	// of the call ({scope.id}: the field id of the object argument scope),
	// e.g. "erase telemetry {environmentSlug}".
	Confirm string
	// Reason, for MCPNever only, says why the operation is not exposed.
	Reason string
	// ConfirmBody, for MCPDestructive only, is the request's body field
	// or query parameter that carries the same phrase to the daemon (an
	// erase's or the cache wipe's "confirmation"): the tool fills it from
	// confirm and does not list it, so the phrase is asked for once.
	ConfirmBody string
	// ConfirmActions, for MCPDestructive only, limits the phrase to the
	// calls whose body "action" is one of these; a call with another
	// action needs no confirm (converge: a preview or refresh destroys
	// and launches nothing, and the daemon asks no phrase for any action;
	// docs/operations.md, "MCP server"). Empty: every call needs it.
	ConfirmActions []string
	// Destroys marks an operation that can destroy what it acts on
	// without a phrase of its own (a reaper tick destroys the droplets
	// whose deadlines passed): its tool is annotated destructive.
	Destroys bool
	// Aliases are former tool names still answered, for one release, so
	// that MCP clients' allow-lists keep working (docs/operations.md, "MCP
	// server").
	Aliases []string
}

// Policies of the table.
var (
	mcpRead   = MCPPolicy{Access: MCPRead}
	mcpMutate = MCPPolicy{Access: MCPMutate}
)

// mcpDestructive is a destructive policy with its confirmation template.
func mcpDestructive(confirm string) MCPPolicy {
	return MCPPolicy{Access: MCPDestructive, Confirm: confirm}
}

// mcpNever is a never policy with its reason.
func mcpNever(reason string) MCPPolicy { return MCPPolicy{Access: MCPNever, Reason: reason} }

// Actioned is implemented by request bodies whose "action" field selects
// among operations sharing one route (the ingest-keys endpoint).
type Actioned interface {
	// ActionName is the body's action, "" when absent.
	ActionName() string
}

// typeOf is reflect.TypeFor, shorter in the table.
func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// Operations lists every admin operation, domain by domain. Operations that
// share a route are adjacent and carry distinct Actions.
var Operations = join(statusOperations, environmentOperations, organizationOperations, ingestKeyOperations, fleetOperations,
	retentionOperations, telemetryOperations, costOperations, deploymentOperations, reaperOperations, eventOperations, runOperations, boxOperations, agentRolloutOperations, jobOperations,
	consoleOperations, sshOperations, loopOperations, logOperations, reportOperations, alertOperations)

func join(groups ...[]Operation) []Operation {
	var all []Operation
	for _, g := range groups {
		all = append(all, g...)
	}
	return all
}

// Lookup returns the operation with id.
func Lookup(id string) (Operation, bool) {
	for _, op := range Operations {
		if op.ID == id {
			return op, true
		}
	}
	return Operation{}, false
}

// SharesRoute reports whether op's route is also another operation's, in
// which case the body's action selects between them.
func (op Operation) SharesRoute() bool {
	for _, o := range Operations {
		if o.ID != op.ID && o.Method == op.Method && o.Path == op.Path {
			return true
		}
	}
	return false
}

// BodyFor checks and completes a raw body (nil for none) for operation id,
// so that a body sent under one operationId can only do what that operation
// names. Errors (each a command-line mistake): an unknown id; any body for
// an operation without a body (HasBody); for operations sharing a route, a
// body that is not a JSON object or whose "action" belongs to another
// operation. Those operations get their action set, so `chalupa admin api
// adminRevokeIngestKey --body '{"keyId":…}'` works as named; the default
// operation (Action "") is passed on as given.
func BodyFor(id string, body []byte) ([]byte, error) {
	op, ok := Lookup(id)
	if !ok {
		return nil, fmt.Errorf("unknown operation %q", id)
	}
	if !op.HasBody() {
		if len(body) > 0 {
			return nil, fmt.Errorf("%s takes no body", id)
		}
		return nil, nil
	}
	if !op.SharesRoute() {
		return body, nil
	}
	var m map[string]any
	if len(body) > 0 {
		// A JSON null decodes without error into a nil map.
		if err := json.Unmarshal(body, &m); err != nil || m == nil {
			return nil, fmt.Errorf("%s body must be a JSON object", id)
		}
	}
	action := op.Action
	if a, ok := m["action"]; ok {
		s, isString := a.(string)
		switch {
		case action == "" && isString && (s == "" || s == defaultAction):
			return body, nil
		case action == "":
			return nil, fmt.Errorf(`%s takes no action (or %q); use %s`, id, defaultAction, otherOperations(op))
		case !isString || s != action:
			return nil, fmt.Errorf("%s takes action %q", id, action)
		}
	}
	if action == "" {
		return body, nil
	}
	if m == nil {
		m = map[string]any{}
	}
	m["action"] = action
	return json.Marshal(m)
}

// defaultAction is the explicit name of a shared route's default operation:
// {"action":"issue"} is taken as well as no action.
const defaultAction = "issue"

// ForAction returns the operation on method+path that action selects: the
// one with that Action, or the default one (Action "") for "" and "issue".
func ForAction(method, path, action string) (Operation, bool) {
	if action == defaultAction {
		action = ""
	}
	for _, op := range Operations {
		if op.Method == method && op.Path == path && op.Action == action {
			return op, true
		}
	}
	return Operation{}, false
}

// otherOperations names the operations sharing op's route, " or "-joined.
func otherOperations(op Operation) string {
	s := ""
	for _, o := range Operations {
		if o.ID != op.ID && o.Method == op.Method && o.Path == op.Path {
			if s != "" {
				s += " or "
			}
			s += o.ID
		}
	}
	return s
}

// Shared constants of the table.
const (
	methodGet    = http.MethodGet
	methodPost   = http.MethodPost
	methodPut    = http.MethodPut
	methodDelete = http.MethodDelete
)
