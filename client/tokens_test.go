package client

import "testing"

func TestIDTokens(t *testing.T) {
	if got := Token("a.b*c> d"); got != "a_b_c__d" {
		t.Errorf("Token = %q", got)
	}
	if got := idToken("job-1_ok"); got != "job-1_ok" {
		t.Errorf("idToken of a plain id = %q", got)
	}
	if a, b := idToken("a.b"), idToken("a_b"); a == b || a[0] != '~' {
		t.Errorf("idToken(a.b) = %q collides with or looks like a plain id (%q)", a, b)
	}
}
