package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/protocol"
)

// OpenAPIPath is the admin route serving the OpenAPI document
// (docs/operations.md, "OpenAPI").
const OpenAPIPath = "/api/admin/openapi.json"

// Security scheme names of the document.
const (
	schemeAdmin = "adminBearer"
	schemeReady = "readyBearer"
	// The protocol-v1 signature is four headers, all required: one apiKey
	// scheme each, listed together in one requirement (a logical AND).
	schemeKeyID     = "v1KeyId"
	schemeTimestamp = "v1Timestamp"
	schemeNonce     = "v1Nonce"
	schemeSignature = "v1Signature"
)

// OpenAPI returns the OpenAPI 3.1 document of the admin, ingest and
// health APIs, generated from the admin operation table, the ingest routes
// and the wire types; version is the build's. Console pages are HTML for a
// browser and are not described.
func OpenAPI(version string) ([]byte, error) {
	return json.MarshalIndent(openAPIDocument(version), "", "  ")
}

type obj = map[string]any

// jsonContent is a JSON body of schema s.
func jsonContent(s any) obj { return obj{"application/json": obj{"schema": s}} }

// errorResponse is a chalupa error body answer.
func errorResponse(desc string) obj {
	return obj{"description": desc, "content": jsonContent(obj{"$ref": "#/components/schemas/ErrorBody"})}
}

// statusBody is {"status": one of values}.
func statusBody(values ...string) obj {
	return obj{"type": "object", "required": []string{"status"},
		"properties": obj{"status": obj{"type": "string", "enum": values}}}
}

// docPaths is the document's paths object under construction.
type docPaths obj

// add sets the operation op of path and method.
func (p docPaths) add(path, method string, op obj) {
	item, _ := p[path].(obj)
	if item == nil {
		item = obj{}
		p[path] = item
	}
	item[strings.ToLower(method)] = op
}

// openAPIDocument is the whole document: info, paths (health and probes,
// signed ingest, admin) and components. Named wire types are described
// once, under components/schemas, in the order the paths first use them.
func openAPIDocument(version string) obj {
	p := docPaths{}
	comps := apischema.NewComponents()
	addProbePaths(p)
	addIngestPaths(p, comps)
	addAdminPaths(p, comps)
	// errorResponse refers to ErrorBody by name.
	comps.For(reflect.TypeFor[adminapi.ErrorBody](), apischema.Response)
	schemas := obj{}
	for name, s := range comps.Schemas {
		schemas[name] = s
	}
	return obj{
		"openapi": "3.1.0",
		"info": obj{"title": "chalupa", "version": version,
			"description": "The control plane's admin, signed ingest and health APIs, generated from the admin operation table (docs/operations.md, \"OpenAPI\")."},
		// A relative server: the document is served by the daemon it
		// describes, so "/" resolves against the URL it was fetched from,
		// and a document printed by `chalupa admin api --openapi` knows
		// no origin (docs/operations.md, "OpenAPI").
		"servers":    []obj{{"url": "/", "description": "the daemon serving this document (relative to the URL it was fetched from)"}},
		"paths":      obj(p),
		"components": obj{"schemas": schemas, "securitySchemes": securitySchemes()},
	}
}

// headersTooLarge is the 431 every route can answer before its handler
// runs (maxHeaderBytes, in Server.wrap).
func headersTooLarge() obj {
	return errorResponse("headers_too_large: request line and headers exceed " + bytesText(maxHeaderBytes))
}

// addProbePaths adds the public and probe routes: health, readiness and
// metrics.
func addProbePaths(p docPaths) {
	p.add("/api/health", http.MethodGet, obj{"operationId": "health", "summary": "liveness: the process serves HTTP",
		"security": []obj{}, "responses": obj{"200": obj{"description": "serving", "content": jsonContent(statusBody("ok"))},
			"431": headersTooLarge()}})
	p.add("/api/ready", http.MethodGet, obj{"operationId": "ready", "summary": "readiness: the database answers and replication is not failing",
		"security": []obj{{schemeReady: []string{}}}, "responses": obj{
			"200": obj{"description": "ready", "content": jsonContent(statusBody("ready"))},
			"503": obj{"description": "not ready (no detail)", "content": jsonContent(statusBody("unavailable"))},
			"401": errorResponse("missing or wrong ready token"), "431": headersTooLarge()}})
	p.add("/metrics", http.MethodGet, obj{"operationId": "metrics", "summary": "Prometheus metrics (text exposition format)",
		"security": []obj{{schemeReady: []string{}}}, "responses": obj{
			"200": obj{"description": "metrics", "content": obj{"text/plain": obj{"schema": obj{"type": "string"}}}},
			"401": errorResponse("missing or wrong ready token"), "431": headersTooLarge()}})
}

// addIngestPaths adds the signed ingest routes of ingest.Routes, the table
// the daemon mounts them from: all four protocol-v1 headers required.
func addIngestPaths(p docPaths, comps *apischema.Components) {
	signed := []obj{{schemeKeyID: []string{}, schemeTimestamp: []string{}, schemeNonce: []string{}, schemeSignature: []string{}}}
	for _, r := range ingest.Routes {
		schema := comps.For(r.Request, apischema.Request)
		op := obj{"operationId": IngestOperationID(r.Path),
			"summary": r.Summary, "security": signed,
			"requestBody": obj{"required": true, "description": "at most " + bytesText(r.MaxBody), "content": jsonContent(schema)},
			"responses": obj{
				"202":     obj{"description": "accepted (or already stored)", "content": jsonContent(comps.For(r.Answer, apischema.Response))},
				"400":     errorResponse("malformed_json or unreadable_body"),
				"401":     errorResponse("signature refused: missing_headers, unknown_key, key_revoked, bad_timestamp, timestamp_skew, bad_signature, bad_nonce"),
				"413":     errorResponse("body_too_large: the body exceeds the route's bound"),
				"422":     errorResponse("invalid_body (or a field's own code): the body is well-formed JSON but breaks a rule of its schema"),
				"431":     headersTooLarge(),
				"default": errorResponse("refused: environment, quota or overload (docs/operations.md, \"Signed ingest\")")}}
		if old := legacyIngestOperationID(r.Path); old != op["operationId"] {
			op["x-chalupa-aliases"] = []string{old}
		}
		p.add(r.Path, r.Method, op)
	}
}

// IngestOperationID is the operationId of the signed ingest route at path:
// "ingest" and each segment after /api/ingest/ with its first letter
// upper-cased, so /api/ingest/logs/plan is ingestLogsPlan, an identifier
// in every language a generator writes (docs/operations.md, "OpenAPI").
func IngestOperationID(path string) string {
	var b strings.Builder
	b.WriteString("ingest")
	for _, seg := range strings.Split(strings.TrimPrefix(path, "/api/ingest/"), "/") {
		if seg != "" {
			b.WriteString(strings.ToUpper(seg[:1]) + seg[1:])
		}
	}
	return b.String()
}

// legacyIngestOperationID is the id earlier documents gave the
// route (ingestLogs/plan), kept as the documented alias
// x-chalupa-aliases (docs/operations.md, "OpenAPI").
func legacyIngestOperationID(path string) string {
	rest := strings.TrimPrefix(path, "/api/ingest/")
	return "ingest" + strings.ToUpper(rest[:1]) + rest[1:]
}

// addAdminPaths adds this document's own route and every admin operation
// of adminapi.Operations; operations sharing a route become one OpenAPI
// operation (the body's action selects), named by the default one.
func addAdminPaths(p docPaths, comps *apischema.Components) {
	p.add(OpenAPIPath, http.MethodGet, obj{"operationId": "adminGetOpenAPI", "summary": "this document",
		"security": []obj{{schemeAdmin: []string{}}}, "responses": obj{
			"200": obj{"description": "the OpenAPI 3.1 document", "content": jsonContent(openAPIDocumentSchema())},
			"401": errorResponse("missing or wrong admin token"), "431": headersTooLarge()}})
	type route struct{ method, path string }
	shared := map[route][]adminapi.Operation{}
	var order []route
	for _, op := range adminapi.Operations {
		r := route{op.Method, op.Path}
		if _, seen := shared[r]; !seen {
			order = append(order, r)
		}
		shared[r] = append(shared[r], op)
	}
	for _, r := range order {
		p.add(openAPIPath(r.path), r.method, adminOperation(comps, shared[r]))
	}
}

// securitySchemes are the admin and ready bearers and the four headers of
// a protocol-v1 signature, one apiKey scheme each.
func securitySchemes() obj {
	return obj{
		schemeAdmin:     obj{"type": "http", "scheme": "bearer", "description": "CHALUPA_ADMIN_TOKEN; cookies never authenticate"},
		schemeReady:     obj{"type": "http", "scheme": "bearer", "description": "CHALUPA_READY_TOKEN"},
		schemeKeyID:     obj{"type": "apiKey", "in": "header", "name": protocol.HeaderKeyID, "description": "protocol v1: the ingest key's id"},
		schemeTimestamp: obj{"type": "apiKey", "in": "header", "name": protocol.HeaderTimestamp, "description": "protocol v1: Unix seconds, within the skew window"},
		schemeNonce:     obj{"type": "apiKey", "in": "header", "name": protocol.HeaderNonce, "description": "protocol v1: single-use nonce"},
		schemeSignature: obj{"type": "apiKey", "in": "header", "name": protocol.HeaderSignature, "description": "protocol v1: v1=<hex HMAC-SHA256 of the canonical string>"},
	}
}

// openAPIPath turns httprouter's ":name" segments into "{name}".
func openAPIPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") {
			segs[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(segs, "/")
}

// bytesText is n bytes in KiB when whole.
func bytesText(n int64) string {
	if n%1024 == 0 {
		return jsonNumber(n/1024) + " KiB"
	}
	return jsonNumber(n) + " bytes"
}

func jsonNumber(n int64) string { b, _ := json.Marshal(n); return string(b) }

// openAPIDocumentSchema is the answer schema of this document's own route:
// the top level of an OpenAPI 3.1 document as this daemon writes it, its
// paths and components open (the OpenAPI 3.1 specification describes
// them; a client reads them as plain objects).
func openAPIDocumentSchema() obj {
	str := obj{"type": "string"}
	open := obj{"type": "object", "additionalProperties": obj{"type": "object"}}
	return obj{"type": "object", "additionalProperties": false, "required": []string{"openapi", "info", "paths"},
		"description": "an OpenAPI 3.1 document (https://spec.openapis.org/oas/v3.1.0)",
		"properties": obj{
			"openapi": obj{"type": "string", "pattern": `^3\.1\.[0-9]+$`},
			"info": obj{"type": "object", "additionalProperties": false, "required": []string{"title", "version"},
				"properties": obj{"title": str, "version": str, "description": str}},
			"servers": obj{"type": "array", "items": obj{"type": "object", "additionalProperties": false, "required": []string{"url"},
				"properties": obj{"url": str, "description": str}}},
			"paths": open,
			"components": obj{"type": "object", "additionalProperties": false,
				"properties": obj{"schemas": open, "securitySchemes": open}},
		}}
}

// adminOperation describes ops, the operations of one admin route (one,
// or several told apart by the body's action).
func adminOperation(comps *apischema.Components, ops []adminapi.Operation) obj {
	first := ops[0]
	for _, op := range ops {
		if op.Action == "" {
			first = op
		}
	}
	o := obj{"operationId": first.ID, "summary": first.Summary, "security": []obj{{schemeAdmin: []string{}}}}
	responses := obj{
		"401":     errorResponse("missing or wrong admin token"),
		"431":     headersTooLarge(),
		"default": errorResponse("refused (docs/operations.md, \"Admin API\")"),
	}
	if len(ops) > 1 {
		var desc []string
		for _, op := range ops {
			a := op.Action
			if a == "" {
				a = "(none) or issue"
			}
			desc = append(desc, op.ID+": action "+a+" — "+op.Summary)
		}
		o["description"] = "Operations sharing this route, selected by the body's action: " + strings.Join(desc, "; ")
		ids := make([]string, len(ops))
		for i, op := range ops {
			ids[i] = op.ID
		}
		o["x-chalupa-operations"] = ids
	}
	for _, op := range ops {
		status := jsonNumber(int64(op.Status))
		resp := comps.For(op.Response, apischema.Response)
		if prev, ok := responses[status].(obj); ok {
			s := prev["content"].(obj)["application/json"].(obj)["schema"]
			if !reflect.DeepEqual(s, resp) {
				prev["content"] = jsonContent(obj{"oneOf": []any{s, resp}})
			}
			continue
		}
		responses[status] = obj{"description": "success", "content": jsonContent(resp)}
	}
	if first.HasBody() {
		responses["413"] = errorResponse(fmt.Sprintf("body_too_large: the body exceeds %d KiB", maxAdminBody>>10))
	}
	o["responses"] = responses
	if params := adminParameters(first); len(params) > 0 {
		o["parameters"] = params
	}
	if first.HasBody() {
		o["requestBody"] = obj{"required": true, "description": "at most 64 KiB, decoded strictly",
			"content": jsonContent(requestSchema(comps, ops))}
	}
	return o
}

// requestSchema is the body schema of ops, one route's operations: the
// one request type's, or anyOf each action's type where they differ (the
// ingest-key bodies), so a generated client sees what each action
// requires (docs/operations.md, "OpenAPI"). The alternatives exclude each
// other (each action's enum names only its own, and only the default's
// action may be absent), but anyOf rather than oneOf: Redocly's
// no-illogical-composition-keywords takes a oneOf alternative whose
// discriminating property is optional for an overlap.
func requestSchema(comps *apischema.Components, ops []adminapi.Operation) obj {
	var alts []any
	seen := map[reflect.Type]bool{}
	for _, op := range ops {
		if op.Request != nil && op.HasBody() && !seen[op.Request] {
			seen[op.Request] = true
			alts = append(alts, comps.For(op.Request, apischema.Request))
		}
	}
	if len(alts) == 1 {
		return alts[0].(obj)
	}
	return obj{"anyOf": alts}
}

// adminParameters are op's path and query parameters, each schema with
// the keywords of its field's `schema` tag (docs/operations.md, "OpenAPI").
func adminParameters(op adminapi.Operation) []obj {
	if op.Request == nil {
		return nil
	}
	var out []obj
	for i := range op.Request.NumField() {
		f := op.Request.Field(i)
		for _, in := range []string{"path", "query"} {
			name, ok := f.Tag.Lookup(in)
			if !ok {
				continue
			}
			s := obj{"type": "string"}
			switch f.Type {
			case reflect.TypeFor[time.Time]():
				s["format"] = "date-time"
			case reflect.TypeFor[time.Duration]():
				s["description"] = "a Go duration: 90s, 5m, 24h"
			default:
				if f.Type.Kind() == reflect.Int64 {
					s = obj{"type": "integer"}
				}
			}
			// The rules the daemon holds the value to
			// (checkParams): one tag, both places.
			apischema.RulesOf(f.Tag).Apply(apischema.Schema(s))
			out = append(out, obj{"name": name, "in": in, "required": in == "path", "schema": s})
		}
	}
	return out
}
