package daemon

import (
	"context"
	"net/http"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/console"
	"github.com/chalupa-run/chalupa/storage"
)

// consoleHandlers set the console password (docs/operations.md,
// "Console"). They hold the database and the clock.
type consoleHandlers struct {
	db    *storage.DB
	clock clockwork.Clock
}

func (h *consoleHandlers) register(o *operations) {
	handleOp(o, adminapi.OpSetConsolePassword, h.setPassword)
}

// setPassword hashes the password outside the writer (argon2id takes tens
// of milliseconds) and stores the hash, ending every console session in
// the same transaction. The refusal names the rule, never the password.
func (h *consoleHandlers) setPassword(ctx context.Context, req adminapi.SetConsolePasswordRequest) (adminapi.ConsolePasswordSet, error) {
	// The tags' rules first (docs/operations.md, "OpenAPI"); the byte
	// bound is HashPassword's.
	if err := checkShapeAs(req, nil, shapeAnswer{http.StatusUnprocessableEntity, "bad_password"}); err != nil {
		return adminapi.ConsolePasswordSet{}, err
	}
	hash, err := console.HashPassword(req.Password)
	if err != nil {
		return adminapi.ConsolePasswordSet{}, fail(http.StatusUnprocessableEntity, "bad_password", err.Error())
	}
	now := h.clock.Now().UTC()
	var ended int64
	err = h.db.Writer.Do(ctx, func(tx storage.Tx) error {
		var err error
		ended, err = storage.SetConsolePassword(ctx, tx, hash, now)
		return err
	})
	if err != nil {
		return adminapi.ConsolePasswordSet{}, err
	}
	return adminapi.ConsolePasswordSet{SetAt: now, SessionsEnded: ended}, nil
}
