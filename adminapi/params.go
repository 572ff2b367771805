package adminapi

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Path and query parameters (docs/operations.md, "Admin API").
//
// A request type's field tagged `path:"name"` is the path segment ":name" of
// the operation's Path; one tagged `query:"name"` is the query parameter
// name. Both carry `json:"-"`: a parameter is never also a body field. A GET
// operation's request type has parameters only. Supported field types and
// their text forms: string (as is), int64 (decimal), time.Time (RFC 3339)
// and time.Duration (Go syntax: 90s, 5m, 24h). A zero value is not sent, so
// a query parameter's zero value means "absent"; a path parameter must be
// non-empty.
//
// A parameter field may carry a `schema` tag (the grammar of
// apischema.RulesOf: pattern, enum, minimum, maximum) and a `refuse` tag
// ("STATUS code"): the OpenAPI document writes the rules into the
// parameter's schema and the daemon refuses a value that breaks them with
// that status and code before the handler runs (ParamsOf), so the two
// are one declaration (docs/operations.md, "OpenAPI"). A query parameter
// without `refuse` is refused 422 bad_param; a path parameter with rules
// must say its refusal (usually its resource's 404: a malformed name names
// nothing).

// Params are an operation's path and query parameters by name, in their
// text form (the raw call of `chalupa admin api --param`).
type Params map[string]string

// Parameter kinds, the struct tag keys.
const (
	paramPath  = "path"
	paramQuery = "query"
)

// paramField is one parameter field of a request type.
type paramField struct {
	kind, name string
	index      int
	typ        reflect.Type
	tag        reflect.StructTag
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[time.Duration]()
)

// paramFields lists t's parameter fields (t a struct type; nil: none).
func paramFields(t reflect.Type) []paramField {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var out []paramField
	for i := range t.NumField() {
		f := t.Field(i)
		for _, kind := range []string{paramPath, paramQuery} {
			if name, ok := f.Tag.Lookup(kind); ok {
				out = append(out, paramField{kind: kind, name: name, index: i, typ: f.Type, tag: f.Tag})
			}
		}
	}
	return out
}

// HasBody reports whether op takes a JSON body: it has a request type with
// at least one exported field that is not a parameter.
func (op Operation) HasBody() bool {
	if op.Request == nil {
		return false
	}
	for i := range op.Request.NumField() {
		f := op.Request.Field(i)
		if !f.IsExported() {
			continue
		}
		if _, p := f.Tag.Lookup(paramPath); p {
			continue
		}
		if _, q := f.Tag.Lookup(paramQuery); q {
			continue
		}
		return true
	}
	return false
}

// Parameters returns the names of op's path parameters and of its query
// parameters, in field order.
func (op Operation) Parameters() (path, query []string) {
	for _, f := range paramFields(op.Request) {
		if f.kind == paramPath {
			path = append(path, f.name)
		} else {
			query = append(query, f.name)
		}
	}
	return path, query
}

// pathSegments returns the ":name" segments of an httprouter path.
func pathSegments(path string) []string {
	var out []string
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, ":") {
			out = append(out, seg[1:])
		}
	}
	return out
}

// checkParamTable reports how op's parameter fields disagree with its
// Path (each ":name" segment has exactly one path field and each path field
// a segment), carry no `json:"-"`, have an unsupported type, repeat a name,
// or, for a GET, sit beside body fields. TestOperationTable runs it.
func (op Operation) checkParamTable() error {
	fields := paramFields(op.Request)
	seen := map[string]bool{}
	segs := map[string]bool{}
	for _, s := range pathSegments(op.Path) {
		segs[s] = true
	}
	for _, f := range fields {
		if seen[f.name] {
			return fmt.Errorf("parameter %q is declared twice", f.name)
		}
		seen[f.name] = true
		if f.kind == paramPath && !segs[f.name] {
			return fmt.Errorf("path parameter %q is not a segment of %s", f.name, op.Path)
		}
		if tag := op.Request.Field(f.index).Tag.Get("json"); tag != "-" {
			return fmt.Errorf("parameter %q needs `json:\"-\"` (parameters are never body fields)", f.name)
		}
		switch f.typ {
		case reflect.TypeFor[string](), reflect.TypeFor[int64](), timeType, durationType:
		default:
			return fmt.Errorf("parameter %q has unsupported type %v", f.name, f.typ)
		}
	}
	for _, f := range fields {
		if _, _, err := f.refusal(); err != nil {
			return err
		}
	}
	for s := range segs {
		if !seen[s] {
			return fmt.Errorf("path segment :%s has no request field tagged path:%q", s, s)
		}
	}
	if op.Method == methodGet && op.HasBody() {
		return errors.New("a GET request type has path and query parameters only")
	}
	return nil
}

// refusal is the status and code that refuse a value of f breaking its
// rules: its `refuse` tag, else 422 bad_param for a query parameter.
// Errors: a malformed `refuse` tag, or a path parameter with rules and no
// `refuse` tag.
func (f paramField) refusal() (int, string, error) {
	tag, ok := f.tag.Lookup("refuse")
	if !ok {
		if f.kind == paramPath && f.tag.Get("schema") != "" {
			return 0, "", fmt.Errorf("path parameter %q has rules but no `refuse` tag", f.name)
		}
		return 422, "bad_param", nil
	}
	st, code, _ := strings.Cut(tag, " ")
	status, err := strconv.Atoi(st)
	if err != nil || status < 400 || status > 499 || code == "" {
		return 0, "", fmt.Errorf("parameter %q: `refuse` tag wants \"STATUS code\", got %q", f.name, tag)
	}
	return status, code, nil
}

// Param is one parameter of a decoded request value, for the daemon's
// check of its rules (docs/operations.md, "OpenAPI").
type Param struct {
	// Name and In ("path" or "query") say which parameter.
	Name, In string
	// Tag is the field's tag; its `schema` key holds the rules.
	Tag reflect.StructTag
	// Value is the decoded value; its zero value is absent.
	Value reflect.Value
	// Status and Code refuse a value that breaks the rules: the field's
	// `refuse` tag, else 422 bad_param.
	Status int
	Code   string
}

// ParamsOf lists the parameters of req (a request value of a type from the
// table, decoded by DecodeParams) in field order; nil for a value of
// another kind.
func ParamsOf(req any) []Param {
	v := reflect.ValueOf(req)
	if !v.IsValid() || v.Kind() != reflect.Struct {
		return nil
	}
	var out []Param
	for _, f := range paramFields(v.Type()) {
		status, code, err := f.refusal()
		if err != nil { // TestOperationTable finds it first
			status, code = 422, "bad_param"
		}
		out = append(out, Param{Name: f.name, In: f.kind, Tag: f.tag, Value: v.Field(f.index), Status: status, Code: code})
	}
	return out
}

// EncodeParams returns the parameters of req (a request value of a type
// from the table) in text form; zero values are left out.
func EncodeParams(req any) Params {
	v := reflect.ValueOf(req)
	if !v.IsValid() || v.Kind() != reflect.Struct {
		return nil
	}
	var out Params
	for _, f := range paramFields(v.Type()) {
		fv := v.Field(f.index)
		if fv.IsZero() {
			continue
		}
		if out == nil {
			out = Params{}
		}
		out[f.name] = formatParam(fv)
	}
	return out
}

// formatParam is the text form of a supported parameter value.
func formatParam(v reflect.Value) string {
	switch v.Type() {
	case timeType:
		return v.Interface().(time.Time).UTC().Format(time.RFC3339Nano)
	case durationType:
		return time.Duration(v.Int()).String()
	}
	if v.Kind() == reflect.Int64 {
		return strconv.FormatInt(v.Int(), 10)
	}
	return v.String()
}

// ParamError is a parameter the server cannot take. Its message names the
// parameter, never the value that was sent.
type ParamError struct {
	// Name is the parameter's name ("" for an unknown query parameter,
	// whose name is the caller's text).
	Name string
	// Reason says what is wrong, e.g. "must be an RFC 3339 time".
	Reason string
}

// Error is the message the daemon answers with (422 bad_param).
func (e *ParamError) Error() string {
	if e.Name == "" {
		return e.Reason
	}
	return "parameter " + e.Name + " " + e.Reason
}

// DecodeParams fills the parameter fields of *dst (a request type of op)
// from the route's path parameters (pathParam returns one by name) and the
// query. Strict: a query parameter op does not take, or one given more than
// once, or a value that does not parse, is a *ParamError; an absent query
// parameter leaves its zero value.
func DecodeParams(op Operation, dst any, pathParam func(name string) string, query url.Values) error {
	fields := paramFields(op.Request)
	known := map[string]bool{}
	for _, f := range fields {
		if f.kind == paramQuery {
			known[f.name] = true
		}
	}
	for name, vals := range query {
		if !known[name] {
			_, q := op.Parameters()
			if len(q) == 0 {
				return &ParamError{Reason: "this operation takes no query parameters"}
			}
			return &ParamError{Reason: "unknown query parameter; this operation takes " + strings.Join(q, ", ")}
		}
		if len(vals) > 1 {
			return &ParamError{Name: name, Reason: "is given more than once"}
		}
	}
	if len(fields) == 0 {
		return nil
	}
	v := reflect.ValueOf(dst).Elem()
	for _, f := range fields {
		var s string
		if f.kind == paramPath {
			s = pathParam(f.name)
		} else {
			if _, ok := query[f.name]; !ok {
				continue
			}
			s = query.Get(f.name)
		}
		if err := parseParam(s, v.Field(f.index)); err != nil {
			return &ParamError{Name: f.name, Reason: err.Error()}
		}
	}
	return nil
}

// parseParam sets v from its text form s; the error says what s must be.
func parseParam(s string, v reflect.Value) error {
	if s == "" {
		return errors.New("is empty")
	}
	switch v.Type() {
	case timeType:
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return errors.New("must be an RFC 3339 time, e.g. 2026-12-01T10:00:00Z")
		}
		v.Set(reflect.ValueOf(t.UTC()))
		return nil
	case durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("must be a duration, e.g. 5m or 1h")
		}
		v.SetInt(int64(d))
		return nil
	}
	if v.Kind() == reflect.Int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return errors.New("must be a decimal integer")
		}
		v.SetInt(n)
		return nil
	}
	v.SetString(s)
	return nil
}

// requestURL is op's path with its path parameters filled in (escaped) and
// its query parameters appended. Errors: a parameter op does not take, or a
// path parameter missing or empty.
func (op Operation) requestURL(params Params) (string, error) {
	pathNames, queryNames := op.Parameters()
	isPath, isQuery := map[string]bool{}, map[string]bool{}
	for _, n := range pathNames {
		isPath[n] = true
	}
	for _, n := range queryNames {
		isQuery[n] = true
	}
	for name := range params {
		if !isPath[name] && !isQuery[name] {
			return "", fmt.Errorf("%s takes no parameter %q", op.ID, name)
		}
	}
	segs := strings.Split(op.Path, "/")
	for i, seg := range segs {
		if !strings.HasPrefix(seg, ":") {
			continue
		}
		val := params[seg[1:]]
		if val == "" {
			return "", fmt.Errorf("%s needs path parameter %q", op.ID, seg[1:])
		}
		segs[i] = url.PathEscape(val)
	}
	path := strings.Join(segs, "/")
	q := url.Values{}
	for _, n := range queryNames {
		if val := params[n]; val != "" {
			q.Set(n, val)
		}
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return path, nil
}

// CheckParams reports, as requestURL would, whether params suit operation
// id: every name is one of its parameters and every path parameter is
// given. The CLI runs it before calling, so a mistake exits 2.
func CheckParams(id string, params Params) error {
	op, ok := Lookup(id)
	if !ok {
		return fmt.Errorf("unknown operation %q", id)
	}
	_, err := op.requestURL(params)
	return err
}
