package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/jetembed/jetembed/schema"
)

func init() {
	register(command{
		name:    "tenant",
		summary: "tenant add NAME: print (or --write) a tenant's NATS account block, or with --jwt the nsc commands",
		run:     runTenant,
	})
}

// tenantFlags are the flags of `tenant add`.
type tenantFlags struct {
	write     string
	jwt       bool
	fleet     string
	consumers int
}

func runTenant(_ context.Context, args []string, io stdio) error {
	if len(args) == 0 || args[0] != "add" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "--help-all") {
			fmt.Fprintf(io.out, "Usage: jetembed tenant add NAME [flags]\n\n%s\n", tenantUsage)
			return nil
		}
		return fmt.Errorf("%w: jetembed tenant add NAME [flags]", errUsage)
	}
	fset := newFlagSet("tenant add", io)
	var f tenantFlags
	fset.StringVar(&f.write, "write", "", "write the account block to this file (created, with its directory; an existing file is left alone) instead of printing it; include it inside the accounts block of accounts.conf")
	fset.BoolVar(&f.jwt, "jwt", false, "print the nsc commands that make the tenant an account of an operator (decentralized JWT auth, no server restart) instead of a config block")
	fset.StringVar(&f.fleet, "fleet-account", DefaultFleetAccount, "the account that holds the streams and exports to tenants (in JWT mode its name in nsc)")
	fset.IntVar(&f.consumers, "results-consumers", schema.DefaultResultsConsumers, "results consumers the tenant may have at once (readers of its stored results: jetembed results, the client's Results), named <tenant>_r0 ..; the server refuses more")
	// NAME may come before or after the flags.
	rest := args[1:]
	var name string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	if err := fset.Parse(rest); err != nil {
		return err
	}
	if name == "" && fset.NArg() == 1 {
		name = fset.Arg(0)
	} else if fset.NArg() > 0 || name == "" {
		return fmt.Errorf("%w: jetembed tenant add NAME [flags]: one name", errUsage)
	}
	if err := checkTenantName(name); err != nil {
		return err
	}
	if f.consumers < 1 || f.consumers > 64 {
		return fmt.Errorf("%w: --results-consumers %d: want 1 to 64", errUsage, f.consumers)
	}
	if f.fleet == "" || strings.ContainsAny(f.fleet, ". \t\r\n") {
		return fmt.Errorf("%w: --fleet-account %q is not an account name", errUsage, f.fleet)
	}
	out := tenantAccountBlock(name, f.fleet, f.consumers)
	if f.jwt {
		out = tenantNscCommands(name, f.fleet, f.consumers)
	}
	if f.write == "" {
		_, err := fmt.Fprint(io.out, out)
		return err
	}
	// deploy/README's layout keeps the blocks in tenants/ beside
	// accounts.conf: the first tenant makes it.
	if err := os.MkdirAll(filepath.Dir(f.write), 0o755); err != nil {
		return err
	}
	fh, err := os.OpenFile(f.write, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: %s exists: a tenant block is never overwritten (remove it first)", errUsage, f.write)
	}
	if err != nil {
		return err
	}
	if _, err := fh.WriteString(out); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return err
	}
	fmt.Fprintf(io.err, "wrote tenant %s to %s: include it inside the accounts block (include ./%s), set $%s in the server's environment, and reload the server\n",
		name, f.write, f.write, passwordVariable(name))
	return nil
}

const tenantUsage = `Prints the account of a new tenant: an account that imports the fleet
account's job subjects, request endpoints and results, each bound by the
server to the tenant's own name, with one user of the same name. Nothing
of the fleet's account or the embedder changes: add the block inside the
accounts block of deploy/nats/accounts.conf (or --write it to a file and
include that there), give the server $<NAME>_PASSWORD, reload it
(nats-server --signal reload), and run the tenant's tools with
--tenant NAME (JETEMBED_TENANT).

With --jwt it prints the nsc commands instead: the tenant's account under
the operator, its imports and user; no server restart. In JWT mode the
server binds the tenant token to the account's public key, so the tenant's
subjects carry that key, and the commands end by recording key -> name.`
