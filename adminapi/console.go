package adminapi

import (
	"context"
	"net/http"
	"time"
)

// OpSetConsolePassword sets the console's operator password.
const OpSetConsolePassword = "adminSetConsolePassword"

var consoleOperations = []Operation{
	{ID: OpSetConsolePassword, MCP: mcpNever("sets the console password, a secret"), Method: methodPost, Path: "/api/admin/console/password", Status: http.StatusOK, Mutates: true,
		Request: typeOf[SetConsolePasswordRequest](), Response: typeOf[ConsolePasswordSet](),
		Summary: `set the console password (argon2id hash stored; every console session ends): {"password"}`},
}

// SetConsolePasswordRequest is the body of adminSetConsolePassword. The
// password is 12 characters to 1,024 bytes of UTF-8 without control
// characters (docs/operations.md, "Console"). It travels like the admin
// token itself, over the bearer-authenticated admin channel, and is never
// stored, logged or answered: the daemon keeps its argon2id hash only.
// The tag declares the characters and MinPasswordRunes (422
// bad_password); MaxPasswordBytes counts bytes, which JSON Schema's
// maxLength does not, so it stays the handler's (docs/operations.md,
// "OpenAPI").
type SetConsolePasswordRequest struct {
	Password string `json:"password" schema:"required,pattern=password,minLength=12"`
}

// ConsolePasswordSet answers adminSetConsolePassword.
type ConsolePasswordSet struct {
	// SetAt is when the hash was stored.
	SetAt time.Time `json:"setAt"`
	// SessionsEnded counts the console sessions the change signed out.
	SessionsEnded int64 `json:"sessionsEnded"`
}

// SetConsolePassword calls adminSetConsolePassword. A refused password is
// an *APIError with Status 422 (bad_password).
func (c *Client) SetConsolePassword(ctx context.Context, req SetConsolePasswordRequest) (ConsolePasswordSet, error) {
	return call[ConsolePasswordSet](ctx, c, OpSetConsolePassword, req)
}
