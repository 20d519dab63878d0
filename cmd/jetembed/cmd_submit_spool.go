package main

import (
	"fmt"
	"os"

	"github.com/jetembed/jetembed/schema"
)

// spool keeps the results of a bulk run that cannot be written yet (a job
// before them is unanswered, or a resumed run has not read their input
// lines yet) in a temporary file, so that memory holds only their offsets
// however many arrive out of order. It is not safe for concurrent use.
type spool struct {
	f   *os.File
	end int64
	at  map[int]spooled // by job number
}

type spooled struct {
	off int64
	n   int
}

func newSpool() (*spool, error) {
	f, err := os.CreateTemp("", "jetembed-submit-*.spool")
	if err != nil {
		return nil, fmt.Errorf("result spool: %w", err)
	}
	// Removed at once: the open file lives until Close, and nothing is
	// left behind whatever ends the process.
	_ = os.Remove(f.Name())
	return &spool{f: f, at: map[int]spooled{}}, nil
}

// Close releases the file.
func (s *spool) Close() error { return s.f.Close() }

// Len is the number of results held.
func (s *spool) Len() int { return len(s.at) }

// Has reports whether job k's result is held.
func (s *spool) Has(k int) bool {
	_, ok := s.at[k]
	return ok
}

// Put stores job k's result, unless one is held already (a duplicate).
func (s *spool) Put(k int, res *schema.Result) error {
	if s.Has(k) {
		return nil
	}
	data, err := schema.EncodeResult(res, schema.EncodingMsgpack)
	if err != nil {
		return fmt.Errorf("result spool: job %d: %w", k, err)
	}
	if _, err := s.f.WriteAt(data, s.end); err != nil {
		return fmt.Errorf("result spool: %w", err)
	}
	s.at[k] = spooled{off: s.end, n: len(data)}
	s.end += int64(len(data))
	return nil
}

// Take returns job k's result and forgets it; nil when none is held. The
// file only grows: a run's results are written once each.
func (s *spool) Take(k int) (*schema.Result, error) {
	sp, ok := s.at[k]
	if !ok {
		return nil, nil
	}
	delete(s.at, k)
	data := make([]byte, sp.n)
	if _, err := s.f.ReadAt(data, sp.off); err != nil {
		return nil, fmt.Errorf("result spool: %w", err)
	}
	res, err := schema.DecodeResult(data, schema.EncodingMsgpack)
	if err != nil {
		return nil, fmt.Errorf("result spool: job %d: %w", k, err)
	}
	return res, nil
}
