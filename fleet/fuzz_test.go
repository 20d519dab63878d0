package fleet

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzParseKey: any key parses without panicking; a key it accepts is
// exactly the key this package would write for what it parsed, with a
// shape small enough to multiply without overflow.
func FuzzParseKey(f *testing.F) {
	k := ShapeKey{Model: KeyToken("bge-m3@0123456789ab"), SM: "sm89", Batch: 4, Seq: 8192}
	for _, s := range []string{k.String(), k.Lock(), k.Want(), ProbeKey("bge-m3@0123456789ab", "cpu", "amd64"), MemberKey("gpu-3/42")} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		pk := ParseKey(key)
		var again string
		switch pk.Kind {
		case KindUnknown:
			return
		case KindMember:
			again = MemberKey(pk.Member)
		case KindProbe:
			again = probePrefix + pk.Shape.Model + "." + pk.Shape.SM + "." + pk.Arch
		case KindShape:
			again = pk.Shape.String()
		case KindLock:
			again = pk.Shape.Lock()
		case KindWant:
			again = pk.Shape.Want()
		}
		if again != key {
			t.Fatalf("ParseKey(%q) = %+v, which renders as %q", key, pk, again)
		}
		if pk.Kind != KindProbe && pk.Kind != KindMember && (pk.Shape.Batch < 1 || pk.Shape.Seq < 1 || pk.Shape.Batch > 999999 || pk.Shape.Seq > 999999) {
			t.Fatalf("ParseKey(%q): shape %dx%d out of bounds", key, pk.Shape.Batch, pk.Shape.Seq)
		}
		if !validKey.MatchString(key) {
			t.Fatalf("ParseKey accepted %q, not a valid KV key", key)
		}
	})
}

// FuzzDecodeRecords: any value decodes (or is refused) as each kind of
// record without panicking; what is accepted is within the bounds.
func FuzzDecodeRecords(f *testing.F) {
	f.Add([]byte(`{"by":"host/1","at":"2026-01-01T00:00:00Z","via":"lock","compile_ms":12,"files":["a/b.engine"]}`))
	f.Add([]byte(`{"a":1e-5,"bq":2e-9,"by":"h"}`))
	f.Add([]byte(`{"by":"h","at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"name":"h/1","model":"m@1","sm":"cpu","shapes":3,"ceiling":512}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if rec, err := DecodeShapeRecord(b); err == nil {
			if len(rec.By) > maxMemberLen || len(rec.Files) > maxRecordFiles || rec.CompileMS < 0 {
				t.Fatalf("shape record out of bounds: %+v", rec)
			}
			for _, name := range rec.Files {
				if strings.HasPrefix(name, "/") || strings.HasPrefix(name, "../") || name == ".." {
					t.Fatalf("shape record names %q outside the cache", name)
				}
			}
		}
		if rec, err := DecodeLockRecord(b); err == nil && len(rec.By) > maxMemberLen {
			t.Fatalf("lock record out of bounds: %+v", rec)
		}
		if rec, err := DecodeMemberRecord(b); err == nil {
			if rec.Name == "" || len(rec.Name) > maxMemberLen || rec.Shapes < 0 || rec.Ceiling < 0 || rec.Ceiling > maxCount {
				t.Fatalf("member record out of bounds: %+v", rec)
			}
		}
		if rec, err := DecodeProbeRecord(b); err == nil {
			if !costCoefficient(rec.A) || !costCoefficient(rec.Bq) || rec.A == 0 && rec.Bq == 0 {
				t.Fatalf("probe record %s accepted: a=%s bq=%s", b, strconv.FormatFloat(rec.A, 'g', -1, 64), strconv.FormatFloat(rec.Bq, 'g', -1, 64))
			}
		}
	})
}
