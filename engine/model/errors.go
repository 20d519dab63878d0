package model

import "errors"

// Errors returned by [Open], wrapped with the file they concern; compare
// them with errors.Is.
var (
	// ErrMissingFile means a file the directory must hold is absent.
	ErrMissingFile = errors.New("model: missing file")
	// ErrNotDownloaded means a repo id is in no local Hugging Face cache.
	ErrNotDownloaded = errors.New("model: not downloaded")
	// ErrChecksum means a file's sha256 differs from the manifest or the pin.
	ErrChecksum = errors.New("model: checksum mismatch")
	// ErrLayout means the graph's outputs match neither export layout, or
	// it takes inputs jetembed cannot feed, or element types it cannot
	// use.
	ErrLayout = errors.New("model: unknown graph interface")
	// ErrInvalid means a file is present but its content is unusable
	// (bad JSON, head shapes not matching hidden_size, ...).
	ErrInvalid = errors.New("model: invalid file")
)
