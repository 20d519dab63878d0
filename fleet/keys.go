package fleet

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Keys of the engines bucket. KV keys allow only [-/_=.a-zA-Z0-9] with '.'
// separating tokens, so model ids, SMs and arches are encoded with
// [KeyToken]: a model id "bge-m3@0123456789ab" becomes the token
// "bge-m3_0123456789ab".
//
//	<model>.<sm>.b<B>.s<S>        a compiled shape ([ShapeRecord])
//	lock.<model>.<sm>.b<B>.s<S>   its compile lock, with a per-key TTL ([LockRecord])
//	want.<model>.<sm>.b<B>.s<S>   a shape the JIT guard refused ([WantRecord])
//	probe.<model>.<sm>.<arch>     packing cost coefficients ([ProbeRecord])
//	member.<name>                 a live member's heartbeat, with a per-key TTL ([MemberRecord])
//
// sm is the GPU compute capability ("sm89" for 8.9, see [SMToken]) or
// "cpu": TensorRT plans only load on the SM they were built for.
const (
	lockPrefix   = "lock."
	wantPrefix   = "want."
	probePrefix  = "probe."
	memberPrefix = "member."
)

// KeyToken turns s into one token of a KV key: '@' becomes '_' (so the
// sha prefix of a model id stays readable after the last '_') and any
// other character outside [-_=a-zA-Z0-9] becomes '-'.
func KeyToken(s string) string {
	if s == "" {
		return "-"
	}
	b := []byte(s)
	for i, c := range b {
		switch {
		case c == '@':
			b[i] = '_'
		case c == '-' || c == '_' || c == '=' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		default:
			b[i] = '-'
		}
	}
	return string(b)
}

// SMToken is the key token of a GPU compute capability: "8.9", "sm_89"
// and "sm89" become "sm89"; "" and "cpu" become "cpu".
func SMToken(capability string) string {
	c := strings.ToLower(capability)
	if c == "" || c == "cpu" {
		return "cpu"
	}
	c = strings.TrimPrefix(strings.TrimPrefix(c, "sm"), "_")
	return "sm" + KeyToken(strings.ReplaceAll(c, ".", ""))
}

// ShapeKey names one engine shape of one model on one SM. Model and SM
// are key tokens (see [KeyToken]).
type ShapeKey struct {
	Model string `json:"model"`
	SM    string `json:"sm"`
	Batch int    `json:"batch"`
	Seq   int    `json:"seq"`
}

// String is the shape key: "<model>.<sm>.b<B>.s<S>".
func (k ShapeKey) String() string {
	return k.Model + "." + k.SM + ".b" + strconv.Itoa(k.Batch) + ".s" + strconv.Itoa(k.Seq)
}

// Lock is the key of the shape's compile lock.
func (k ShapeKey) Lock() string { return lockPrefix + k.String() }

// Want is the key that asks the fleet to compile the shape.
func (k ShapeKey) Want() string { return wantPrefix + k.String() }

// KeyKind says what a key of the engines bucket holds.
type KeyKind uint8

// The kinds of keys of the engines bucket.
const (
	KindUnknown KeyKind = iota
	KindShape
	KindLock
	KindWant
	KindProbe
	KindMember
)

func (k KeyKind) String() string {
	return [...]string{"unknown", "shape", "lock", "want", "probe", "member"}[k]
}

// ParsedKey is a key of the engines bucket taken apart. For probes only
// Shape.Model, Shape.SM and Arch are set; for members only Member.
type ParsedKey struct {
	Kind   KeyKind
	Shape  ShapeKey
	Arch   string
	Member string
}

// ParseKey takes a key of the engines bucket apart; keys it does not know
// have Kind [KindUnknown]. Keys come from the network, so it accepts only
// what this package writes: tokens of [KeyToken]'s alphabet, at most
// [MaxKeyLen] bytes, and batch and seq as plain decimal numbers (no sign,
// no leading zero) of at most six digits, so that no key names a shape
// whose size overflows anything.
func ParseKey(key string) ParsedKey {
	if len(key) > MaxKeyLen {
		return ParsedKey{}
	}
	var kind KeyKind
	switch {
	case strings.HasPrefix(key, lockPrefix):
		kind, key = KindLock, key[len(lockPrefix):]
	case strings.HasPrefix(key, wantPrefix):
		kind, key = KindWant, key[len(wantPrefix):]
	case strings.HasPrefix(key, memberPrefix):
		if t := key[len(memberPrefix):]; isToken(t) {
			return ParsedKey{Kind: KindMember, Member: t}
		}
		return ParsedKey{}
	case strings.HasPrefix(key, probePrefix):
		t := strings.Split(key[len(probePrefix):], ".")
		if len(t) != 3 || !isToken(t[0]) || !isToken(t[1]) || !isToken(t[2]) {
			return ParsedKey{}
		}
		return ParsedKey{Kind: KindProbe, Shape: ShapeKey{Model: t[0], SM: t[1]}, Arch: t[2]}
	default:
		kind = KindShape
	}
	t := strings.Split(key, ".")
	if len(t) != 4 || !isToken(t[0]) || !isToken(t[1]) || !strings.HasPrefix(t[2], "b") || !strings.HasPrefix(t[3], "s") {
		return ParsedKey{}
	}
	b, ok1 := parseCount(t[2][1:])
	s, ok2 := parseCount(t[3][1:])
	if !ok1 || !ok2 {
		return ParsedKey{}
	}
	return ParsedKey{Kind: kind, Shape: ShapeKey{Model: t[0], SM: t[1], Batch: b, Seq: s}}
}

// MaxKeyLen bounds the keys [ParseKey] reads: a model token, an SM and two
// numbers are far shorter.
const MaxKeyLen = 256

// isToken reports whether s is a non-empty token of [KeyToken]'s alphabet.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '-' && c != '_' && c != '=' && (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}

// parseCount reads a positive decimal of 1..6 digits without a leading zero.
func parseCount(s string) (int, bool) {
	if s == "" || len(s) > 6 || s[0] == '0' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

// ProbeKey is the key of the cost coefficients of a model on an SM (see
// [SMToken]) and host architecture.
func ProbeKey(model, sm, arch string) string {
	return probePrefix + KeyToken(model) + "." + SMToken(sm) + "." + KeyToken(arch)
}

// MemberKey is the heartbeat key of the member named name (host/pid).
func MemberKey(name string) string { return memberPrefix + KeyToken(name) }

// How a shape came to be compiled, in [ShapeRecord.Via].
const (
	// ViaLock: compiled by the fleet under the compile lock (a wanted
	// shape, or [Member.Compile]).
	ViaLock = "lock"
	// ViaRun: the engine ran it first on its own (start-up warm-up or an
	// in-band run) and the fleet published it afterwards.
	ViaRun = "run"
)

// ShapeRecord is the value of a shape key. Values are JSON so that
// `nats kv get` shows them as they are.
type ShapeRecord struct {
	// By is the process that compiled it (host/pid).
	By string    `json:"by"`
	At time.Time `json:"at"`
	// Via is [ViaLock] or [ViaRun].
	Via string `json:"via"`
	// CompileMS is how long the compile took; 0 when unknown (ViaRun).
	CompileMS int64 `json:"compile_ms,omitempty"`
	// Files are the engine cache files (relative to the cache directory)
	// written by the compile: what a peer loads instead of building.
	Files []string `json:"files,omitempty"`
}

// LockRecord is the value of a lock key.
type LockRecord struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// WantRecord is the value of a want key.
type WantRecord struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// ProbeRecord is the value of a probe key: the packing cost model
// a*B*S + bq*B*S^2 in seconds, as the engine's packer (engine/internal/pack) fits it.
type ProbeRecord struct {
	A  float64   `json:"a"`
	Bq float64   `json:"bq"`
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// MemberRecord is the value of a member key: who the member is and what
// its engine covers, as of its last heartbeat.
type MemberRecord struct {
	// Name is the member's name (host/pid), as in the records it writes.
	Name string `json:"name"`
	// Model is the model id, SM the key token of its compute capability.
	Model string `json:"model"`
	SM    string `json:"sm"`
	// Shapes is how many shapes its engine has warmed; Ceiling the
	// longest warmed seq (what its JIT guard admits).
	Shapes  int       `json:"shapes"`
	Ceiling int       `json:"ceiling"`
	Started time.Time `json:"started"`
	At      time.Time `json:"at"`
}

func encodeRecord(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("jetstream: fleet record: %v", err)) // plain structs always marshal
	}
	return b
}
