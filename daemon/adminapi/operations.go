// Package adminapi is the contract of chalupa's admin API: the table of
// operations (by the seeds' operationId names), the request and response
// shapes, and a typed client. The daemon routes from the same table, so the
// CLI (`chalupa admin …`) and the server cannot drift apart; Tailscale's CLI
// and its LocalAPI client are the model.
//
// Every admin operation takes `Authorization: Bearer <CHALUPA_ADMIN_TOKEN>`,
// never a cookie, and answers errors as {"error":{"code","message"}}.
package adminapi

import (
	"encoding/json"
	"fmt"
)

// Operation is one admin API operation.
type Operation struct {
	// ID is the operationId, e.g. "adminCreateEnvironment".
	ID string
	// Method and Path locate it; Path uses httprouter syntax (":name").
	Method, Path string
	// Summary is a one-line description for `chalupa admin api --list`.
	Summary string
}

// Operation ids. The names follow the seeds (seed 000 names the Pulumi ones,
// which arrive with the converge issue).
const (
	OpGetStatus           = "adminGetStatus"
	OpCreateEnvironment   = "adminCreateEnvironment"
	OpListEnvironments    = "adminListEnvironments"
	OpIssueIngestKey      = "adminIssueIngestKey"
	OpRotateIngestKey     = "adminRotateIngestKey"
	OpRevokeIngestKey     = "adminRevokeIngestKey"
	OpListFleet           = "adminListFleet"
	pathIngestKeys        = "/api/admin/ingest-keys"
	pathEnvironments      = "/api/admin/environments"
	methodGet, methodPost = "GET", "POST"
)

// Operations lists every admin operation. Issue, rotate and revoke share one
// endpoint (seed 002, "Ingest key lifecycle"); the body's action selects.
var Operations = []Operation{
	{OpGetStatus, methodGet, "/api/admin/status", "version, uptime, schema version, database size, replication health"},
	{OpCreateEnvironment, methodPost, pathEnvironments, `create an environment: {"slug","name"}`},
	{OpListEnvironments, methodGet, pathEnvironments, "list environments"},
	{OpIssueIngestKey, methodPost, pathIngestKeys, `issue a fresh ingest key: {"environmentSlug"}`},
	{OpRotateIngestKey, methodPost, pathIngestKeys, `rotate: {"action":"rotate","environmentSlug"}`},
	{OpRevokeIngestKey, methodPost, pathIngestKeys, `revoke: {"action":"revoke","keyId"}`},
	{OpListFleet, methodGet, "/api/admin/fleet", "environments with their deployments and key counts"},
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

// keyActions is the "action" each ingest-key operation sends: they share one
// endpoint and the body's action selects what happens, so a body must not
// name another operation's action. Issue sends none (the server also takes
// "issue").
var keyActions = map[string]string{
	OpIssueIngestKey:  "",
	OpRotateIngestKey: "rotate",
	OpRevokeIngestKey: "revoke",
}

// BodyFor checks and completes a raw body (nil for none) for operation id,
// so that a body sent under one operationId can only do what that operation
// names. Errors (each a command-line mistake): an unknown id; any body for a
// GET operation; for the ingest-key operations, a body that is not a JSON
// object or whose "action" belongs to another operation. Rotate and revoke
// get their action set, so `chalupa admin api adminRevokeIngestKey --body
// '{"keyId":…}'` works as named; issue's body is passed on as given.
func BodyFor(id string, body []byte) ([]byte, error) {
	op, ok := Lookup(id)
	if !ok {
		return nil, fmt.Errorf("unknown operation %q", id)
	}
	if op.Method == methodGet {
		if len(body) > 0 {
			return nil, fmt.Errorf("%s takes no body", id)
		}
		return nil, nil
	}
	action, isKeyOp := keyActions[id]
	if !isKeyOp {
		return body, nil
	}
	var m map[string]any
	if len(body) > 0 {
		// A JSON null decodes without error into a nil map.
		if err := json.Unmarshal(body, &m); err != nil || m == nil {
			return nil, fmt.Errorf("%s body must be a JSON object", id)
		}
	}
	if a, ok := m["action"]; ok {
		s, isString := a.(string)
		switch {
		case action == "" && isString && (s == "" || s == "issue"):
			return body, nil
		case action == "":
			return nil, fmt.Errorf(`%s takes no action (or "issue"); use %s or %s`, id, OpRotateIngestKey, OpRevokeIngestKey)
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
