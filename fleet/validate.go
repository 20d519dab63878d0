package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path"
	"strings"
	"sync"
)

// Everything a member reads from the engines bucket was written by someone
// else: any client allowed to put into the bucket (or a reply subject that
// resolves into it) can write any key and value. Keys are taken apart by
// [ParseKey], shapes checked by the engine (Engine.ShapeAdmissible)
// and values decoded here, bounded, before anything uses them.

// Bounds of the records of the engines bucket.
const (
	maxRecordBytes = 64 << 10
	maxMemberLen   = 256
	maxRecordFiles = 4096
	maxFileLen     = 1024
)

// errRecord reports a value of the engines bucket that is not a record
// this package would write. Its text never includes the value.
var errRecord = errors.New("not a fleet record")

// DecodeShapeRecord decodes and checks the value of a shape key.
func DecodeShapeRecord(b []byte) (ShapeRecord, error) {
	var rec ShapeRecord
	if err := decodeRecord(b, &rec); err != nil {
		return ShapeRecord{}, err
	}
	// The fields every member writes are required: any JSON object
	// decodes (unknown fields ignored), and one that is not a record (an
	// answer relayed into the bucket, {}) must never count as a compiled
	// shape.
	switch {
	case rec.By == "" || len(rec.By) > maxMemberLen:
		return ShapeRecord{}, fmt.Errorf("%w: member name empty or over %d bytes", errRecord, maxMemberLen)
	case rec.Via != ViaLock && rec.Via != ViaRun:
		return ShapeRecord{}, fmt.Errorf("%w: unknown via", errRecord)
	case rec.CompileMS < 0:
		return ShapeRecord{}, fmt.Errorf("%w: negative compile time", errRecord)
	case len(rec.Files) > maxRecordFiles:
		return ShapeRecord{}, fmt.Errorf("%w: over %d files", errRecord, maxRecordFiles)
	}
	for _, f := range rec.Files {
		if f == "" || len(f) > maxFileLen || path.IsAbs(f) || strings.Contains(f, "\\") ||
			path.Clean(f) != f || f == ".." || strings.HasPrefix(f, "../") {
			return ShapeRecord{}, fmt.Errorf("%w: a file outside the engine cache", errRecord)
		}
	}
	return rec, nil
}

// DecodeLockRecord decodes and checks the value of a lock or want key
// ([WantRecord] has the same fields).
func DecodeLockRecord(b []byte) (LockRecord, error) {
	var rec LockRecord
	if err := decodeRecord(b, &rec); err != nil {
		return LockRecord{}, err
	}
	if len(rec.By) > maxMemberLen {
		return LockRecord{}, fmt.Errorf("%w: member name over %d bytes", errRecord, maxMemberLen)
	}
	return rec, nil
}

// DecodeProbeRecord decodes and checks the value of a probe key: the
// coefficients must be finite, not negative and not both zero. Whether
// they are plausible for a model is the engine's to say (UseCost).
func DecodeProbeRecord(b []byte) (ProbeRecord, error) {
	var rec ProbeRecord
	if err := decodeRecord(b, &rec); err != nil {
		return ProbeRecord{}, err
	}
	if !costCoefficient(rec.A) || !costCoefficient(rec.Bq) || rec.A == 0 && rec.Bq == 0 {
		return ProbeRecord{}, fmt.Errorf("%w: coefficients are not a cost model", errRecord)
	}
	if len(rec.By) > maxMemberLen {
		return ProbeRecord{}, fmt.Errorf("%w: member name over %d bytes", errRecord, maxMemberLen)
	}
	return rec, nil
}

// DecodeMemberRecord decodes and checks the value of a member key.
func DecodeMemberRecord(b []byte) (MemberRecord, error) {
	var rec MemberRecord
	if err := decodeRecord(b, &rec); err != nil {
		return MemberRecord{}, err
	}
	switch {
	case rec.Name == "" || len(rec.Name) > maxMemberLen || len(rec.Model) > maxMemberLen:
		return MemberRecord{}, fmt.Errorf("%w: member or model name empty or over %d bytes", errRecord, maxMemberLen)
	case !isToken(rec.SM) || len(rec.SM) > 64:
		return MemberRecord{}, fmt.Errorf("%w: not an sm token", errRecord)
	case rec.Shapes < 0 || rec.Shapes > maxCount || rec.Ceiling < 0 || rec.Ceiling > maxCount:
		return MemberRecord{}, fmt.Errorf("%w: shape count or ceiling outside 0..%d", errRecord, maxCount)
	}
	return rec, nil
}

// maxCount bounds the numbers of a member record, as [ParseKey] bounds a
// key's batch and seq.
const maxCount = 999999

func costCoefficient(x float64) bool { return x >= 0 && !math.IsInf(x, 1) && !math.IsNaN(x) }

func decodeRecord(b []byte, v any) error {
	if len(b) > maxRecordBytes {
		return fmt.Errorf("%w: over %d bytes", errRecord, maxRecordBytes)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: not its JSON", errRecord)
	}
	return nil
}

// ignoredKeys logs each ignored key once, by key only (never its value),
// for a bounded number of keys; after that it only counts.
type ignoredKeys struct {
	log *slog.Logger

	mu      sync.Mutex
	seen    map[string]struct{}
	dropped int64
}

// maxIgnoredLogged bounds the keys [ignoredKeys] remembers (and logs).
const maxIgnoredLogged = 256

func (g *ignoredKeys) ignore(key, why string) {
	if len(key) > 128 {
		key = key[:128] + "..."
	}
	key = strings.ToValidUTF8(key, "?")
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.seen[key]; ok {
		return
	}
	if g.seen == nil {
		g.seen = map[string]struct{}{}
	}
	if len(g.seen) >= maxIgnoredLogged {
		if g.dropped == 0 {
			g.log.Warn("fleet: more ignored keys in the engines bucket; no longer logging them", "logged", len(g.seen))
		}
		g.dropped++
		return
	}
	g.seen[key] = struct{}{}
	g.log.Warn("fleet: ignoring a key of the engines bucket", "key", key, "why", why)
}

// count is how many distinct keys were ignored (those past the log's
// bound counted per sighting).
func (g *ignoredKeys) count() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int64(len(g.seen)) + g.dropped
}
