// Package mcpserver is `chalupa mcp`: a Model Context Protocol server whose
// tools are generated from the admin operation table (adminapi) and
// call the daemon through the typed admin client (docs/operations.md, "MCP
// server"). Each operation's MCP policy decides its tool: read and mutate
// operations are plain tools, destructive ones need a confirmation phrase,
// and never operations (those that set or return a secret) have no tool.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/internal/lazyre"
	"github.com/chalupa-run/chalupa/internal/strictjson"
)

// ServerName is the implementation name the server announces.
const ServerName = "chalupa"

// ConfirmArg is the argument a destructive tool's call must carry.
const ConfirmArg = "confirm"

// toolPrefix begins every derived tool name, in the style of the converge
// tools' established names (chalupa_admin_pulumi_converge), so that every
// tool reads alike in a client's list.
const toolPrefix = "chalupa_admin_"

// Tool is one exposed operation: its tool name and input schema.
type Tool struct {
	// Name is the MCP tool name.
	Name string
	// Op is the operation the tool calls.
	Op adminapi.Operation
	// Input is the tool's input schema (JSON Schema 2020-12).
	Input apischema.Schema
}

// ToolName is op's tool name: the policy's Tool when set, else
// chalupa_admin_ and the id without "admin" in snake_case, an initialism
// one word (adminListFleet → chalupa_admin_list_fleet, adminGetSSHKey →
// chalupa_admin_get_ssh_key).
func ToolName(op adminapi.Operation) string {
	if op.MCP.Tool != "" {
		return op.MCP.Tool
	}
	rs := []rune(strings.TrimPrefix(op.ID, "admin"))
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) {
			// A word starts at an upper-case letter after a lower-case
			// one, or at the last capital of an initialism before a
			// lower-case letter (SSHKey: SSH, Key).
			prevLower := i > 0 && !unicode.IsUpper(rs[i-1])
			initialismEnd := i > 0 && unicode.IsUpper(rs[i-1]) && i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if prevLower || initialismEnd {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return toolPrefix + b.String()
}

// Tools lists the tools of ops (adminapi.Operations in the server): every
// operation whose policy is not never, in table order. It panics on an
// operation without a policy, or whose parameters and body fields share a
// name: both are mistakes in the table the accounting test catches first.
func Tools(ops []adminapi.Operation) []Tool {
	var out []Tool
	for _, op := range ops {
		switch op.MCP.Access {
		case adminapi.MCPNever:
			continue
		case adminapi.MCPRead, adminapi.MCPMutate, adminapi.MCPDestructive:
		default:
			panic(fmt.Sprintf("mcpserver: operation %s has no MCP policy", op.ID))
		}
		out = append(out, Tool{Name: ToolName(op), Op: op, Input: inputSchema(op)})
	}
	return out
}

// paramSchema is the schema of a path or query parameter's text form,
// described by desc. A field tagged decimal:"true" (a log chunk's seq) is a
// decimal number carried as text, so it takes a JSON integer too (at least
// 0), and its text form is digits only: anyOf the two, each branch of one
// type, which clients mapping tool schemas onto a single-type dialect
// accept where a type array is not portable (docs/operations.md, "MCP
// server").
func paramSchema(f reflect.StructField, desc string) apischema.Schema {
	t := f.Type
	s := apischema.Schema{"type": "string", "description": desc}
	// The field's `schema` tag: the rules the daemon holds the value to
	// and the OpenAPI document states (docs/operations.md, "OpenAPI").
	apischema.RulesOf(f.Tag).Apply(s)
	if f.Tag.Get("decimal") == "true" {
		return apischema.Schema{"description": desc, "anyOf": []any{
			apischema.Schema{"type": "integer", "minimum": 0},
			apischema.Schema{"type": "string", "pattern": "^[0-9]+$"},
		}}
	}
	switch t {
	case reflect.TypeFor[time.Time]():
		s["format"] = "date-time"
	case reflect.TypeFor[time.Duration]():
		// Text such as 90s or 24h, though its kind is int64.
	default:
		if t.Kind() == reflect.Int64 {
			s["type"] = "integer"
		}
	}
	return s
}

// argDescription is the words of op's argument name (a.b: the field b of
// the object argument a): the tool's own, else the common ones, else "".
func argDescription(op adminapi.Operation, name string) string {
	if d, ok := toolDocs[op.ID].Args[name]; ok {
		return d
	}
	return commonArgs[name]
}

// params maps op's parameter names to their field types and kinds.
func params(op adminapi.Operation) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	if op.Request == nil {
		return out
	}
	for i := range op.Request.NumField() {
		f := op.Request.Field(i)
		for _, kind := range []string{"path", "query"} {
			if name, ok := f.Tag.Lookup(kind); ok {
				out[name] = f
			}
		}
	}
	return out
}

// bodyFields is op's body schema's properties, without the action of a
// shared route (the tool fills it in) or {} for an operation without a
// body.
func bodyFields(op adminapi.Operation) apischema.Schema {
	if !op.HasBody() {
		return apischema.Schema{}
	}
	props := apischema.For(op.Request, apischema.Request)["properties"].(apischema.Schema)
	if op.SharesRoute() {
		delete(props, "action")
	}
	// confirm fills it: the phrase is asked for once.
	if op.MCP.ConfirmBody != "" {
		delete(props, op.MCP.ConfirmBody)
	}
	return props
}

// inputSchema is op's tool input: its path and query parameters (the path
// ones required), its body fields, and for a destructive operation the
// required confirm; every property described, the arguments the daemon
// requires required (toolDocs), and the keywords the daemon checks added.
func inputSchema(op adminapi.Operation) apischema.Schema {
	doc := toolDocs[op.ID]
	props := bodyFields(op)
	required := bodyRequired(op)
	path, query := op.Parameters()
	ps := params(op)
	for _, n := range path {
		if _, dup := props[n]; dup {
			panic(fmt.Sprintf("mcpserver: %s: parameter %q is also a body field", op.ID, n))
		}
		props[n] = paramSchema(ps[n], argDescription(op, n))
		required = append(required, n)
	}
	for _, n := range query {
		if _, dup := props[n]; dup {
			panic(fmt.Sprintf("mcpserver: %s: parameter %q is also a body field", op.ID, n))
		}
		if n == op.MCP.ConfirmBody {
			continue
		}
		props[n] = paramSchema(ps[n], argDescription(op, n))
	}
	for name, p := range props {
		ps := p.(apischema.Schema)
		ps["description"] = argDescription(op, name)
		if sub, ok := ps["properties"].(apischema.Schema); ok {
			for k, v := range sub {
				v.(apischema.Schema)["description"] = argDescription(op, name+"."+k)
			}
		}
	}
	for _, r := range doc.Required {
		obj, field, nested := strings.Cut(r, ".")
		if !nested {
			required = append(required, r)
			continue
		}
		o := props[obj].(apischema.Schema)
		req, _ := o["required"].([]string)
		if !slices.Contains(req, field) {
			o["required"] = append(req, field)
		}
	}
	if op.MCP.Access == adminapi.MCPDestructive {
		if _, dup := props[ConfirmArg]; dup {
			panic(fmt.Sprintf("mcpserver: %s: %q is also a body field", op.ID, ConfirmArg))
		}
		props[ConfirmArg] = apischema.Schema{"type": "string",
			"description": "the phrase " + strconv.Quote(op.MCP.Confirm) + ", each {name} replaced by that argument" + confirmWhen(op)}
		if len(op.MCP.ConfirmActions) == 0 {
			required = append(required, ConfirmArg)
		}
	}
	s := apischema.Schema{"type": "object", "properties": props, "additionalProperties": false}
	slices.Sort(required)
	if required = slices.Compact(required); len(required) > 0 {
		s["required"] = required
	}
	return s
}

// bodyRequired is the required fields of op's body schema, if the schema
// marks any (the request schemas' own rules, docs/operations.md "OpenAPI").
func bodyRequired(op adminapi.Operation) []string {
	if !op.HasBody() {
		return nil
	}
	req, _ := apischema.For(op.Request, apischema.Request)["required"].([]string)
	var out []string
	for _, r := range req {
		if r != "action" && r != op.MCP.ConfirmBody {
			out = append(out, r)
		}
	}
	return out
}

// outputSchema is the schema of op's JSON answer when it is an object (MCP
// 2025-06-18 asks an object of structuredContent), else nil.
func outputSchema(op adminapi.Operation) apischema.Schema {
	if op.Response == nil {
		return nil
	}
	s := apischema.For(op.Response, apischema.Response)
	if s["type"] != "object" {
		return nil
	}
	return s
}

// description is the tool's description for a model: what it does and
// answers, when to use it, the confirmation rule of a destructive tool,
// and the operation it calls, once, at the end.
func description(op adminapi.Operation) string {
	doc, ok := toolDocs[op.ID]
	d := op.Summary + "."
	if ok {
		d = doc.What + ". " + doc.When + "."
	}
	if op.MCP.Access == adminapi.MCPDestructive {
		d += fmt.Sprintf(" Destructive: refused unless confirm is exactly %q, each {name} replaced by that argument%s.", op.MCP.Confirm, confirmWhen(op))
	}
	return d + " operationId " + op.ID + "."
}

// confirmWhen is the words limiting op's phrase to some actions
// (MCPPolicy.ConfirmActions), "" when every call needs it.
func confirmWhen(op adminapi.Operation) string {
	if len(op.MCP.ConfirmActions) == 0 {
		return ""
	}
	return "; asked only when action is " + strings.Join(op.MCP.ConfirmActions, " or ") + " (any other action destroys nothing and needs no confirm)"
}

// needsConfirm reports whether a call of op with args must carry the
// phrase: every call of a destructive tool, or only the ones whose action
// is one of op's ConfirmActions.
func needsConfirm(op adminapi.Operation, args map[string]json.RawMessage) bool {
	if op.MCP.Access != adminapi.MCPDestructive {
		return false
	}
	if len(op.MCP.ConfirmActions) == 0 {
		return true
	}
	var action string
	_ = json.Unmarshal(args["action"], &action)
	return slices.Contains(op.MCP.ConfirmActions, action)
}

// idempotentOps are the mutating operations whose repeat with the same
// arguments changes nothing more (a second erase finds nothing to erase;
// a second pause finds the loop paused): their tools are annotated
// idempotent, as every read is.
var idempotentOps = map[string]bool{
	"adminSetSessionPolicy": true, "adminClearSessionPolicy": true, "adminRevokeIngestKey": true, "adminEraseTelemetry": true,
	"adminEndDeployment": true, "adminUpdateBox": true, "adminCancelPulumiState": true, "adminClearPulumiStateCache": true,
	"adminPauseLoop": true, "adminResumeLoop": true, "adminEraseLogs": true, "adminSetLogServices": true,
	"adminAckAlert": true, "adminUnmuteAlertKind": true,
}

// openWorldOps are the operations that reach beyond the daemon's database:
// DigitalOcean, droplets over SSH, the log or replica object store, alert
// receivers. Their tools are annotated open-world.
var openWorldOps = map[string]bool{
	"adminCheckTokens": true, "adminReconcileCosts": true, "adminRunReaperTick": true, "adminUpgradeBoxAgent": true,
	"adminDeliverBoxKey": true, "adminStartAgentRollout": true, "adminRunPulumiConverge": true, "adminDiagnoseJob": true,
	"adminEraseLogs": true, "adminGetOperationsReport": true, "adminTestAlertSinks": true,
}

// annotations are op's tool hints (MCP 2025-06-18): read-only for reads,
// destructive for destructive operations and those that destroy without
// a phrase (a reaper tick), idempotent and open-world as the sets above
// say.
func annotations(op adminapi.Operation) *mcp.ToolAnnotations {
	destroys := op.MCP.Access == adminapi.MCPDestructive || op.MCP.Destroys
	open := openWorldOps[op.ID]
	return &mcp.ToolAnnotations{
		ReadOnlyHint:    op.MCP.Access == adminapi.MCPRead,
		DestructiveHint: &destroys,
		IdempotentHint:  op.MCP.Access == adminapi.MCPRead || idempotentOps[op.ID],
		OpenWorldHint:   &open,
	}
}

// New returns the MCP server with one tool per exposed operation of the
// table; each call goes to the daemon through cl (which holds the admin
// token). version is the build's version, announced to clients.
func New(cl *adminapi.Client, version string) *mcp.Server {
	return newServer(context.Background(), cl, version)
}

// newServer is New whose tool calls also end when stop ends: the SDK
// waits for the calls in flight when its session closes, and their
// requests would otherwise run to the daemon's answer or the timeout.
func newServer(stop context.Context, cl *adminapi.Client, version string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: ServerName, Version: version}, nil)
	for _, t := range Tools(adminapi.Operations) {
		out := outputSchema(t.Op)
		h := stopWith(stop, handler(cl, t.Op, t.Input, out != nil))
		tool := &mcp.Tool{Name: t.Name, Title: toolDocs[t.Op.ID].Title, Description: description(t.Op), InputSchema: t.Input, Annotations: annotations(t.Op)}
		if out != nil {
			tool.OutputSchema = out
		}
		s.AddTool(tool, h)
		// A former name answers like the tool, for one release
		// (docs/operations.md, "MCP server").
		for _, alias := range t.Op.MCP.Aliases {
			a := *tool
			a.Name, a.Description = alias, "Deprecated alias of "+t.Name+", answered for one release."
			s.AddTool(&a, h)
		}
	}
	return s
}

// Run serves the tools over in and out (standard input and output) until
// ctx ends or input ends, answering every request read before its end
// (LineTransport). When ctx ends, the calls in flight are cancelled (their
// requests to the daemon with them) and Run returns ctx's error.
func Run(ctx context.Context, cl *adminapi.Client, version string, in io.Reader, out io.Writer) error {
	return newServer(ctx, cl, version).Run(ctx, &LineTransport{In: in, Out: out})
}

// stopWith is h whose context also ends when stop ends.
func stopWith(stop context.Context, h mcp.ToolHandler) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(stop, cancel)()
		return h(ctx, req)
	}
}

// refused is a tool error the assistant sees (nothing was called).
func refused(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// handler is the tool's call: check the arguments against the tool's
// input schema (its own words in the refusal), check the confirmation of
// a destructive operation, split the arguments into parameters and body,
// check the body against the request type as strictly as the daemon
// will, then call. Every refusal happens before the daemon is called. A
// JSON object answer is also the result's structuredContent when the
// tool has an output schema (structured).
func handler(cl *adminapi.Client, op adminapi.Operation, input apischema.Schema, structured bool) mcp.ToolHandler {
	ps := params(op)
	body := bodyFields(op)
	check := compile(input)
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := map[string]json.RawMessage{}
		if raw := bytes.TrimSpace(req.Params.Arguments); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
			if err := json.Unmarshal(raw, &args); err != nil {
				return refused("arguments must be a JSON object"), nil
			}
		}
		if err := check(args, op.MCP.ConfirmBody); err != nil {
			return refused("refused: %v", err), nil
		}
		if op.MCP.Access == adminapi.MCPDestructive && !needsConfirm(op, args) {
			delete(args, ConfirmArg) // not read, as the daemon reads no phrase
		} else if op.MCP.Access == adminapi.MCPDestructive {
			want, err := confirmPhrase(op.MCP.Confirm, args)
			if err != nil {
				return refused("refused: %v", err), nil
			}
			var got string
			if err := json.Unmarshal(args[ConfirmArg], &got); err != nil || got != want {
				return refused("refused: this tool is destructive; confirm must be exactly %q with each {name} replaced by that argument of this call", op.MCP.Confirm), nil
			}
			delete(args, ConfirmArg)
			if f := op.MCP.ConfirmBody; f != "" {
				// A client written before the phrase was asked once may
				// still send it: the same phrase is accepted.
				var again string
				if v, given := args[f]; given && (json.Unmarshal(v, &again) != nil || again != want) {
					return refused("refused: %s is filled from confirm; leave it out", f), nil
				}
				args[f], _ = json.Marshal(want)
			}
		}
		var pv adminapi.Params
		bodyArgs := map[string]json.RawMessage{}
		for name, v := range args {
			if f, ok := ps[name]; ok {
				s, err := paramText(v, f)
				if err != nil {
					return refused("argument %s: %v", name, err), nil
				}
				if pv == nil {
					pv = adminapi.Params{}
				}
				pv[name] = s
				continue
			}
			if _, ok := body[name]; !ok && name != op.MCP.ConfirmBody {
				return refused("unknown argument %q", name), nil
			}
			bodyArgs[name] = v
		}
		var b []byte
		if op.HasBody() {
			var err error
			if b, err = json.Marshal(bodyArgs); err != nil {
				return refused("arguments cannot be encoded"), nil
			}
			if err := strictjson.Decode(b, reflect.New(op.Request).Interface()); err != nil {
				return refused("arguments: %v", err), nil
			}
			if b, err = adminapi.BodyFor(op.ID, b); err != nil {
				return refused("%v", err), nil
			}
		}
		if err := adminapi.CheckParams(op.ID, pv); err != nil {
			return refused("%v", err), nil
		}
		out, err := cl.Call(ctx, op.ID, pv, b)
		if err != nil {
			var ae *adminapi.APIError
			if errors.As(err, &ae) && ae.Code != "" {
				return refused("the daemon answered %d %s: %s", ae.Status, ae.Code, ae.Message), nil
			}
			return refused("%v", err), nil
		}
		res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(out)}}}
		if structured && json.Valid(out) && bytes.HasPrefix(bytes.TrimSpace(out), []byte("{")) {
			res.StructuredContent = json.RawMessage(out)
		}
		return res, nil
	}
}

// compile returns the check of a call's arguments against the input
// schema s: nil, or the validator's words for the first rule broken (a
// type, pattern, bound, enum, required or unknown argument). The field
// skip (an operation's ConfirmBody, which the tool fills) is left to the
// handler: a client written before it was filled may still send it.
func compile(s apischema.Schema) func(args map[string]json.RawMessage, skip string) error {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: input schema: %v", err))
	}
	var js jsonschema.Schema
	if err := json.Unmarshal(b, &js); err != nil {
		panic(fmt.Sprintf("mcpserver: input schema: %v", err))
	}
	resolved, err := js.Resolve(nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: input schema: %v", err))
	}
	return func(args map[string]json.RawMessage, skip string) error {
		inst := map[string]any{}
		for k, v := range args {
			if k == skip && skip != "" {
				continue
			}
			var x any
			if err := json.Unmarshal(v, &x); err != nil {
				return fmt.Errorf("argument %s is not JSON", k)
			}
			inst[k] = x
		}
		if err := resolved.Validate(inst); err != nil {
			// The validator prints a null as Go's invalid reflect.Value.
			msg := strings.ReplaceAll(err.Error(), `type: <invalid reflect.Value> has type "null", want`, `type: null given (leave out an argument without a value), want`)
			return fmt.Errorf("the arguments break the tool's input schema: %s", strings.TrimPrefix(msg, "validating root: "))
		}
		return nil
	}
}

// paramText is a parameter argument's text form: a JSON string as it is,
// or for an integer or decimal:"true" parameter a JSON integer too.
func paramText(v json.RawMessage, f reflect.StructField) (string, error) {
	t := f.Type
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		return s, nil
	}
	if f.Tag.Get("decimal") == "true" {
		if n, ok := jsonInteger(v); ok && n >= 0 {
			return strconv.FormatInt(n, 10), nil
		}
		return "", errors.New("must be a whole number (0 or more)")
	}
	if t.Kind() == reflect.Int64 && t != reflect.TypeFor[time.Duration]() {
		if n, ok := jsonInteger(v); ok {
			return strconv.FormatInt(n, 10), nil
		}
		return "", errors.New("must be an integer")
	}
	return "", errors.New("must be a string")
}

// jsonInteger reads v as a JSON number with an integral value in int64's
// range, in any of JSON's notations: 3, 3.0 and 3e0 are the same integer
// to JSON Schema (draft 2020-12, "type": "integer"), which has already
// accepted the argument, so they must be to the parameter too.
func jsonInteger(v json.RawMessage) (int64, bool) {
	var num json.Number
	if err := json.Unmarshal(v, &num); err != nil {
		return 0, false
	}
	if n, err := num.Int64(); err == nil {
		return n, true
	}
	f, ok := new(big.Float).SetString(num.String())
	if !ok || !f.IsInt() {
		return 0, false
	}
	n, acc := f.Int64()
	return n, acc == big.Exact
}

// placeholder is a {name} or {name.field} of a confirmation template.
var placeholder = lazyre.New(`\{([A-Za-z0-9_.]+)\}`)

// Placeholders returns the argument paths a confirmation template names.
func Placeholders(template string) []string {
	var out []string
	for _, m := range placeholder.FindAllStringSubmatch(template, -1) {
		out = append(out, m[1])
	}
	return out
}

// confirmPhrase fills template from args; an argument it names that is
// absent or not a string or number is an error naming it.
func confirmPhrase(template string, args map[string]json.RawMessage) (string, error) {
	var missing error
	phrase := placeholder.ReplaceAllStringFunc(template, func(m string) string {
		path := strings.Split(m[1:len(m)-1], ".")
		cur, ok := args[path[0]]
		for _, k := range path[1:] {
			var obj map[string]json.RawMessage
			if !ok || json.Unmarshal(cur, &obj) != nil {
				ok = false
				break
			}
			cur, ok = obj[k]
		}
		var s string
		var n json.Number
		switch {
		case ok && json.Unmarshal(cur, &s) == nil && s != "":
			return s
		case ok && json.Unmarshal(cur, &n) == nil:
			return n.String()
		}
		if missing == nil {
			missing = fmt.Errorf("argument %s is required to form the confirmation phrase", m[1:len(m)-1])
		}
		return m
	})
	return phrase, missing
}
