package fleet

import (
	"regexp"
	"testing"
)

// validKey is nats.go's rule for KV keys.
var validKey = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

func TestKeyTokens(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"bge-m3@0123456789ab", "bge-m3_0123456789ab"},
		{"BAAI/bge-m3.v2@abc", "BAAI-bge-m3-v2_abc"},
		{"", "-"},
		{"tiny hidden@00ff", "tiny-hidden_00ff"},
	} {
		if got := KeyToken(tc.in); got != tc.want {
			t.Errorf("KeyToken(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "cpu"}, {"cpu", "cpu"}, {"CPU", "cpu"},
		{"8.9", "sm89"}, {"sm_89", "sm89"}, {"sm89", "sm89"}, {"12.0", "sm120"},
	} {
		if got := SMToken(tc.in); got != tc.want {
			t.Errorf("SMToken(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestShapeKeysRoundTrip(t *testing.T) {
	k := ShapeKey{Model: KeyToken("bge-m3@0123456789ab"), SM: SMToken("8.9"), Batch: 4, Seq: 8192}
	cases := []struct {
		key  string
		kind KeyKind
	}{
		{k.String(), KindShape},
		{k.Lock(), KindLock},
		{k.Want(), KindWant},
	}
	if cases[0].key != "bge-m3_0123456789ab.sm89.b4.s8192" || cases[1].key != "lock.bge-m3_0123456789ab.sm89.b4.s8192" ||
		cases[2].key != "want.bge-m3_0123456789ab.sm89.b4.s8192" {
		t.Fatalf("keys %q %q %q do not follow the layout", cases[0].key, cases[1].key, cases[2].key)
	}
	for _, tc := range cases {
		if !validKey.MatchString(tc.key) {
			t.Errorf("%q is not a valid KV key", tc.key)
		}
		got := ParseKey(tc.key)
		if got.Kind != tc.kind || got.Shape != k {
			t.Errorf("ParseKey(%q) = %+v, want %v %+v", tc.key, got, tc.kind, k)
		}
	}
	pk := ProbeKey("bge-m3@0123456789ab", "cpu", "amd64/Xeon 8480+")
	if pk != "probe.bge-m3_0123456789ab.cpu.amd64-Xeon-8480-" || !validKey.MatchString(pk) {
		t.Errorf("ProbeKey = %q", pk)
	}
	if got := ParseKey(pk); got.Kind != KindProbe || got.Shape.Model != "bge-m3_0123456789ab" || got.Shape.SM != "cpu" || got.Arch != "amd64-Xeon-8480-" {
		t.Errorf("ParseKey(%q) = %+v", pk, got)
	}
}

func TestParseKeyRejectsForeignKeys(t *testing.T) {
	for _, key := range []string{
		"", "m.cpu.b1", "m.cpu.b1.s", "m.cpu.x1.s8", "m.cpu.b0.s8", "m.cpu.b1.s-8",
		"m.cpu.b1.s8.extra", "lock.m.cpu", "probe.m.cpu", "probe.m.cpu.a.b", "want.m.cpu.b1.sx",
	} {
		if got := ParseKey(key); got.Kind != KindUnknown {
			t.Errorf("ParseKey(%q) = %+v, want unknown", key, got)
		}
	}
}
