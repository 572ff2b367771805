// Package schema holds chalupa's numbered SQL migrations. The files are the
// source of truth for the data model (docs/architecture.md, "Data model"); storage embeds
// them and applies them with goose, recording a checksum of each applied file.
//
// Conventions every migration follows:
//   - every *_at column is INTEGER unix milliseconds, UTC;
//   - tables are STRICT so a wrong type is an error, not a silent coercion;
//   - an applied file is never edited (storage refuses to start if one is):
//     change the schema with a new, higher-numbered file;
//   - every file after 0018 declares its kind before `-- +goose Up`:
//     `-- chalupa:migration expand` (only adds, so the previous release runs
//     on the result) or `-- chalupa:migration contract [floor=N]`
//     (docs/operations.md, "Migrations and restore points").
package schema

import "embed"

// FS is the embedded migration set, files named NNNN_description.sql.
//
//go:embed *.sql
var FS embed.FS
