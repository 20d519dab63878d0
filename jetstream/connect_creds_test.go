package jetstream

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/jetembed/jetembed/internal/natstest"
)

// credsFile writes a decentralized-auth credentials file (user JWT signed by
// account, and the user's seed) and returns its path and the seed.
func credsFile(t *testing.T, account nkeys.KeyPair) (path, seed string) {
	t.Helper()
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	userPub, _ := user.PublicKey()
	userSeed, _ := user.Seed()
	userJWT, err := jwt.NewUserClaims(userPub).Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(userJWT, userSeed)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, string(userSeed)
}

// TestConnectCredsFile runs a server in operator mode (the JWT set-up NGS
// and most multi-tenant deployments use): a creds file of a user of a
// trusted account connects; one of an account the operator never signed is
// refused with an authentication error naming the file, within bounds.
func TestConnectCredsFile(t *testing.T) {
	operator, _ := nkeys.CreateOperator()
	operatorPub, _ := operator.PublicKey()
	opClaims := jwt.NewOperatorClaims(operatorPub)
	if _, err := opClaims.Encode(operator); err != nil {
		t.Fatal(err)
	}
	account, _ := nkeys.CreateAccount()
	accountPub, _ := account.PublicKey()
	accountJWT, err := jwt.NewAccountClaims(accountPub).Encode(operator)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	if err := resolver.Store(accountPub, accountJWT); err != nil {
		t.Fatal(err)
	}
	s := natstest.RunServer(t, natstest.WithoutJetStream(), func(o *server.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{opClaims}
		o.AccountResolver = resolver
	})

	good, _ := credsFile(t, account)
	nc, err := connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}, CredsFile: good})
	if err != nil {
		t.Fatalf("trusted user: %v", err)
	}
	if err := nc.Publish("x", nil); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("trusted user cannot talk to the server: %v", err)
	}

	stranger, _ := nkeys.CreateAccount()
	bad, badSeed := credsFile(t, stranger)
	_, err = connectWithin(t, 5*time.Second, Options{URLs: []string{s.ClientURL()}, CredsFile: bad})
	if !errors.Is(err, ErrAuthentication) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("untrusted account: err = %v, want ErrAuthentication naming %s", err, bad)
	}
	if strings.Contains(err.Error(), badSeed) {
		t.Fatal("error leaks the seed")
	}
}
