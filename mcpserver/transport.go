package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chalupa-run/chalupa/internal/lazyre"
)

// MaxLineBytes is the longest frame (one line of input, in bytes) the
// transport reads; a longer one is answered -32700 and skipped, like a
// malformed one. It is the SDK's own stdio limit.
const MaxLineBytes = mcp.DefaultMaxLineLength

// LineTransport is the stdio transport of `chalupa mcp`: newline-delimited
// JSON-RPC over In and Out (docs/operations.md, "MCP server"). It differs
// from the SDK's StdioTransport in two ways a client can rely on:
//
//   - A line that is not JSON is answered with a JSON-RPC parse error
//     (-32700, id null) and the session keeps serving; a JSON line that is
//     not a JSON-RPC message (a batch among them: MCP 2025-06-18 has none)
//     is answered -32600 (Invalid Request) with its id when it has one,
//     and so is a request whose id is null, a fraction or an integer
//     beyond 2^53-1 (unusableID).
//   - At the end of input every request already read is answered before
//     the session ends, so `printf … | chalupa mcp` gets an answer to each
//     request it sent.
type LineTransport struct {
	// In is read line by line; Out receives one JSON-RPC message a line.
	In  io.Reader
	Out io.Writer
}

// Connect starts reading In; the returned connection is used once.
func (t *LineTransport) Connect(context.Context) (mcp.Connection, error) {
	c := &lineConn{
		out:      t.Out,
		incoming: make(chan jsonrpc.Message),
		closed:   make(chan struct{}),
		answered: make(chan struct{}, 1),
		pending:  map[jsonrpc.ID]bool{},
	}
	go c.readLoop(t.In)
	return c, nil
}

// lineConn is one LineTransport session.
type lineConn struct {
	out     io.Writer
	writeMu sync.Mutex

	// incoming carries decoded messages; it is closed at the end of input.
	incoming  chan jsonrpc.Message
	closed    chan struct{}
	closeOnce sync.Once

	// pending holds the ids of requests read and not yet answered;
	// answered is signalled each time one is answered.
	mu       sync.Mutex
	pending  map[jsonrpc.ID]bool
	answered chan struct{}
}

// readLoop reads lines until the end of input, answering the ones that
// are not messages itself.
func (c *lineConn) readLoop(in io.Reader) {
	defer close(c.incoming)
	r := bufio.NewReader(in)
	for {
		line, tooLong, err := readLine(r)
		if tooLong {
			c.writeError(nil, jsonrpc.CodeParseError, fmt.Sprintf("Parse error: a line longer than %d bytes", MaxLineBytes))
		} else if len(bytes.TrimSpace(line)) > 0 {
			if msg := c.decode(line); msg != nil {
				select {
				case c.incoming <- msg:
				case <-c.closed:
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// readLine reads one line without its newline, at most MaxLineBytes of
// it: a longer line is read to its end and reported tooLong. err is the
// reader's error (io.EOF at the end of input) after the last line.
func readLine(r *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		frag, e := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(frag) > MaxLineBytes+1 {
				tooLong, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		if e != bufio.ErrBufferFull {
			return line, tooLong, e
		}
	}
}

// decode returns line's message, or answers it and returns nil: -32700
// for a line that is not JSON, -32600 for JSON that is not a JSON-RPC
// message.
func (c *lineConn) decode(line []byte) jsonrpc.Message {
	if !json.Valid(line) {
		c.writeError(nil, jsonrpc.CodeParseError, "Parse error: the line is not JSON")
		return nil
	}
	if id, bad := unusableID(line); bad {
		c.writeError(id, jsonrpc.CodeInvalidRequest, "Invalid Request: a request id must be a string or an integer of at most 2^53-1 in magnitude (MCP 2025-06-18), never null")
		return nil
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if resp, ok := msg.(*jsonrpc.Response); err == nil && ok && resp.Result == nil && resp.Error == nil {
		// Neither method, result nor error: the SDK would take it for a
		// response to nothing and drop it unanswered.
		c.writeError(echoID(line), jsonrpc.CodeInvalidRequest, "Invalid Request: a message needs a method (a request or notification), or a result or an error (a response)")
		return nil
	}
	if err == nil {
		return msg
	}
	c.writeError(echoID(line), jsonrpc.CodeInvalidRequest, "Invalid Request: not a JSON-RPC 2.0 request, notification or response (batches are not accepted)")
	return nil
}

// echoID is the id of the JSON object line exactly as sent (its digits
// kept, never read through a float64), for an error answer; nil (JSON
// null) when it has none or its id is neither a string nor a number.
func echoID(line []byte) any {
	var probe struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(line, &probe) != nil {
		return nil
	}
	raw := bytes.TrimSpace(probe.ID)
	if len(raw) == 0 || !(raw[0] == '"' || raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) {
		return nil
	}
	return json.RawMessage(raw)
}

// maxExactID is the largest integer id a JSON number holds exactly (a
// float64, as most clients decode it): a larger one is answered under a
// rounded id the client never sent.
const maxExactID = 1<<53 - 1

// exactInteger is the text of a JSON integer without fraction or exponent.
var exactInteger = lazyre.New(`^-?(0|[1-9][0-9]*)$`)

// unusableID reports a request (an object with a method) whose id MCP
// refuses and the SDK would misread: null (served as a notification, so
// never answered), a fraction (answered truncated), or an integer beyond
// maxExactID (answered rounded). id is the id as sent, for the answer.
func unusableID(line []byte) (id json.RawMessage, bad bool) {
	var probe map[string]json.RawMessage
	if json.Unmarshal(line, &probe) != nil {
		return nil, false
	}
	raw, hasID := probe["id"]
	if _, hasMethod := probe["method"]; !hasID || !hasMethod {
		return nil, false
	}
	raw = bytes.TrimSpace(raw)
	switch {
	case bytes.Equal(raw, []byte("null")):
		return raw, true
	case len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')):
		return nil, false // a string, or not an id at all (DecodeMessage says)
	case !exactInteger.MatchString(string(raw)):
		return raw, true
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return raw, err != nil || n > maxExactID || n < -maxExactID
}

// writeError writes an error response with id (nil: JSON null, as
// JSON-RPC 2.0 requires when the request's id cannot be known).
func (c *lineConn) writeError(id any, code int, message string) {
	b, err := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      any    `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{code, message}})
	if err != nil {
		return
	}
	c.writeLine(b)
}

// writeLine writes b and a newline, one writer at a time.
func (c *lineConn) writeLine(b []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_, err := c.out.Write(append(b, '\n'))
	return err
}

// Read returns the next message; at the end of input it waits until every
// request read has been answered, then reports io.EOF.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	case msg, ok := <-c.incoming:
		if ok {
			if req, isReq := msg.(*jsonrpc.Request); isReq && req.ID.IsValid() {
				c.mu.Lock()
				c.pending[req.ID] = true
				c.mu.Unlock()
			}
			return msg, nil
		}
	}
	for {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n == 0 {
			return nil, io.EOF
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.closed:
			return nil, io.EOF
		case <-c.answered:
		}
	}
}

// Write writes msg as one line; a response marks its request answered.
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if resp, ok := msg.(*jsonrpc.Response); ok {
		msg = withErrorCode(resp)
	}
	b, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encoding a message: %w", err)
	}
	err = c.writeLine(b)
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.mu.Lock()
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		select {
		case c.answered <- struct{}{}:
		default:
		}
	}
	return err
}

// withErrorCode is resp with a JSON-RPC error code where the SDK gives
// none (an error without one is written with code 0, which JSON-RPC 2.0
// does not define): a request other than initialize or ping before the
// session is initialized is -32600 Invalid Request, any other -32603
// Internal error (docs/operations.md, "MCP server").
func withErrorCode(resp *jsonrpc.Response) *jsonrpc.Response {
	var we *jsonrpc.Error
	if resp.Error == nil || (errors.As(resp.Error, &we) && we.Code != 0) {
		return resp
	}
	code := int64(jsonrpc.CodeInternalError)
	if strings.Contains(resp.Error.Error(), "invalid during session initialization") {
		code = jsonrpc.CodeInvalidRequest
	}
	out := *resp
	msg := resp.Error.Error()
	if code == jsonrpc.CodeInvalidRequest {
		msg += ": send initialize, then notifications/initialized, first"
	}
	out.Error = &jsonrpc.Error{Code: code, Message: msg}
	return &out
}

// Close ends the session; a Read waiting for input returns.
func (c *lineConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

// SessionID is empty: a stdio session has no id.
func (c *lineConn) SessionID() string { return "" }
