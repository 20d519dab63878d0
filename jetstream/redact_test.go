package jetstream

import (
	"errors"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":               "nats://127.0.0.1:4222",
		"nats://u:s3cret@127.0.0.1:4222":      "nats://u:xxxxx@127.0.0.1:4222",
		"nats://s3cret@127.0.0.1:4222":        "nats://xxxxx@127.0.0.1:4222",
		"tls://u:s3cret@h:4222/x":             "tls://u:xxxxx@h:4222/x",
		"nats://u:s3cret@127.0.0.1:port":      "nats://xxxxx@127.0.0.1:port",
		"nats://u:s3%zz@h":                    "nats://xxxxx@h",
		"u:s3cret@h:4222":                     "xxxxx@h:4222",
		"nats://u:s3cret@h@other:4222":        "nats://u:xxxxx@other:4222",
		"nats://u:s3cret@[::1":                "nats://xxxxx@[::1",
		"nats://u:s3cret@127.0.0.1:4222/\x7f": "nats://xxxxx@127.0.0.1:4222/\x7f",
	} {
		got := RedactURL(in)
		if got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(got, "s3") {
			t.Errorf("RedactURL(%q) = %q keeps the secret", in, got)
		}
	}
	if got := RedactURLs("nats://a:p1@h1,nats://t0k@h2"); got != "nats://a:xxxxx@h1,nats://xxxxx@h2" {
		t.Errorf("RedactURLs = %q", got)
	}
}

func TestURLErrorsHideCredentials(t *testing.T) {
	for _, u := range []string{"nats://u:s3cret@127.0.0.1:port", "nats://u:s3cret@[::1", "nats://s3cret@h:x", "nats://u:s3cret@h/\x00"} {
		_, err := Options{URLs: []string{u}}.servers()
		if !errors.Is(err, ErrOptions) {
			t.Fatalf("servers(%q) = %v, want ErrOptions", u, err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("servers(%q): %v", u, err)
		}
	}
	if id := (Options{URLs: []string{"nats://s3cret@h"}}).identity(); strings.Contains(id, "s3cret") {
		t.Errorf("identity of a token URL = %q", id)
	}
}
