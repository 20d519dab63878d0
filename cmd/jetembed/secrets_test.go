package main

// Secrets are never printed (issue 11, point 8): a secret is planted in
// every place a credential can be given (URL user:password, URL token, the
// password and token flags and variables, creds and nkey file contents) and
// every output path is searched for it: --print-config, the logs of real
// serve runs against real servers with auth, connect errors (refused
// port, wrong credentials) and URL parse errors.

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetembed/jetembed/internal/natstest"
)

const planted = "pl4nted-s3cret"

// withAuth returns url with userinfo put in front of its host.
func withAuth(url, userinfo string) string {
	return strings.Replace(url, "nats://", "nats://"+userinfo+"@", 1)
}

// deadURL is a loopback URL where nothing listens.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return "nats://127.0.0.1:" + strconv.Itoa(port)
}

func checkNoSecret(t *testing.T, where, out string) {
	t.Helper()
	if strings.Contains(out, planted) || strings.Contains(out, "pl4nted") {
		t.Errorf("%s prints the secret:\n%s", where, out)
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	t.Run("print-config", func(t *testing.T) {
		t.Setenv("JETEMBED_NATS", "nats://u:"+planted+"@127.0.0.1:4222,nats://"+planted+"@127.0.0.1:4223")
		t.Setenv("JETEMBED_NATS_TOKEN", planted)
		t.Setenv("JETEMBED_NATS_PASSWORD", planted)
		code, out, errOut := runCmd(t, context.Background(), "serve", "--print-config", "--nats-token", planted)
		if code != 0 {
			t.Fatalf("serve --print-config: exit %d: %s", code, errOut)
		}
		checkNoSecret(t, "serve --print-config", out+errOut)
		if !strings.Contains(out, "--nats=nats://u:xxxxx@127.0.0.1:4222,nats://xxxxx@127.0.0.1:4223\t") {
			t.Errorf("serve --print-config does not show the URLs redacted:\n%s", out)
		}
		code, out, errOut = runCmd(t, context.Background(), "dev", "--print-config")
		if code != 0 {
			t.Fatalf("dev --print-config: exit %d: %s", code, errOut)
		}
		checkNoSecret(t, "dev --print-config", out+errOut)
		// --help prints defaults: the environment's values are not among them.
		for _, cmd := range []string{"serve", "provision", "submit"} {
			_, out, errOut := runCmd(t, context.Background(), cmd, "--help")
			checkNoSecret(t, cmd+" --help", out+errOut)
		}
	})

	t.Run("serve with user:password in the URL", func(t *testing.T) {
		srv := natstest.RunServer(t, natstest.WithUser("u", planted))
		s := startServe(t, withAuth(srv.ClientURL(), "u:"+planted))
		if got := logValue(s.log.String(), "ready", "nats"); !strings.Contains(got, "u:xxxxx@") {
			t.Errorf("ready line names the server as %q", got)
		}
		s.cancel()
		<-s.done
		s.done <- 0
		checkNoSecret(t, "serve's log", s.log.String())
	})

	t.Run("serve with a token in the URL", func(t *testing.T) {
		srv := natstest.RunServer(t, func(o *server.Options) { o.Authorization = planted })
		s := startServe(t, withAuth(srv.ClientURL(), planted))
		s.cancel()
		<-s.done
		s.done <- 0
		checkNoSecret(t, "serve's log", s.log.String())
	})

	t.Run("connect errors", func(t *testing.T) {
		dead := deadURL(t)
		live := natstest.RunServer(t, natstest.WithUser("u", "right"), natstest.WithoutJetStream())
		dir := t.TempDir()
		creds := filepath.Join(dir, "user.creds")
		if err := os.WriteFile(creds, []byte("-----BEGIN NATS USER JWT-----\n"+planted+"\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\nSU"+planted+"\n------END USER NKEY SEED------\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		nkey := filepath.Join(dir, "user.nk")
		if err := os.WriteFile(nkey, []byte("SU"+planted+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for name, args := range map[string][]string{
			"refused, user:password URL":  {"--nats", withAuth(dead, "u:"+planted)},
			"refused, token URL":          {"--nats", withAuth(dead, planted)},
			"refused, two URLs":           {"--nats", withAuth(dead, "u:"+planted) + "," + withAuth(dead, planted)},
			"refused, password flag":      {"--nats", dead, "--nats-user", "u", "--nats-password", planted},
			"refused, token flag":         {"--nats", dead, "--nats-token", planted},
			"wrong password in the URL":   {"--nats", withAuth(live.ClientURL(), "u:"+planted)},
			"token URL to a user server":  {"--nats", withAuth(live.ClientURL(), planted)},
			"wrong password flag":         {"--nats", live.ClientURL(), "--nats-user", "u", "--nats-password", planted},
			"wrong token flag":            {"--nats", live.ClientURL(), "--nats-token", planted},
			"broken creds file":           {"--nats", live.ClientURL(), "--nats-creds", creds},
			"broken nkey file":            {"--nats", live.ClientURL(), "--nats-nkey", nkey},
			"bad port":                    {"--nats", "nats://u:" + planted + "@127.0.0.1:port"},
			"bad host":                    {"--nats", "nats://u:" + planted + "@[::1"},
			"bad escape":                  {"--nats", "nats://u:" + planted + "%zz@127.0.0.1:4222"},
			"bad token URL":               {"--nats", "nats://" + planted + "@127.0.0.1:port"},
			"two methods":                 {"--nats", withAuth(dead, "u:"+planted), "--nats-token", planted, "--nats-user", "u"},
			"bad URL among good ones":     {"--nats", dead + ",nats://u:" + planted + "@127.0.0.1:x"},
			"control character in a URL":  {"--nats", "nats://u:" + planted + "@127.0.0.1:4222/\x7f"},
			"password flag, bad port URL": {"--nats", "nats://127.0.0.1:port", "--nats-password", planted, "--nats-user", "u"},
		} {
			for _, cmd := range []string{"provision", "serve"} {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				a := append([]string{cmd, "--nats-connect-timeout", "2s"}, args...)
				if cmd == "serve" {
					a = append(a, "--http", "", "--model", tinyModel(t, "tiny-hidden"))
				}
				code, out, errOut := runCmd(t, ctx, a...)
				cancel()
				if code == 0 {
					t.Errorf("%s, %s: exit 0", cmd, name)
				}
				checkNoSecret(t, cmd+", "+name, out+errOut)
			}
		}
	})
}
