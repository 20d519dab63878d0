//go:build !cgo

package ort

import (
	"context"
	"errors"
	"testing"

	"github.com/jetembed/jetembed/engine"
)

func TestNoCgo(t *testing.T) {
	if _, err := Init(LibraryOptions{}); !errors.Is(err, ErrNoCgo) {
		t.Errorf("Init: %v", err)
	}
	if _, err := Open(nil, Provider{}); !errors.Is(err, ErrNoCgo) {
		t.Errorf("Open: %v", err)
	}
	if _, err := Open(nil, Provider{Kind: "rocm"}); !errors.Is(err, ErrProvider) {
		t.Errorf("Open with a bad provider: %v", err)
	}
	var s Session
	if _, err := s.Run(context.Background(), engine.RunInput{}); !errors.Is(err, ErrNoCgo) {
		t.Errorf("Run: %v", err)
	}
}
