package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/jetembed/jetembed/schema"
)

// DefaultFleetAccount is the account of deploy/nats/accounts.conf that holds
// the streams, the embedders and the provisioner, and exports to tenants.
const DefaultFleetAccount = "EMBED"

// tenantName is what `tenant add` accepts: one subject token (a dot would
// split it, and nats-server#2602 breaks service imports of an account
// whose name has one), lowercase so that it never meets the fleet's or the
// system's account, and short, since it is in every subject of the tenant
// and in its password variable.
var tenantName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// checkTenantName reports why name cannot be a tenant account.
func checkTenantName(name string) error {
	switch {
	case !tenantName.MatchString(name):
		return fmt.Errorf("%w: tenant %q: want 1 to 63 of a-z, 0-9, - and _, starting with a letter (one subject token: the server binds it to the account's name)", errUsage, name)
	case !schema.ValidTenant(name):
		return fmt.Errorf("%w: tenant %q is not one subject token", errUsage, name)
	}
	return nil
}

// passwordVariable is the environment variable a tenant's password comes
// from: PRODUCER_A_PASSWORD for producer-a.
func passwordVariable(name string) string {
	return strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_PASSWORD"
}

// tenantImports are the subjects a tenant account imports from the fleet's
// account, each bound by the fleet's export to the tenant's own name
// (account_token_position), but for the flow control of its results
// consumers and the sealed blobs, which name no tenant. Streams carry
// messages to the tenant; services carry its publishes to the fleet, and
// the server routes their answers back.
//
// Its results consumers are named: the server lets it create and delete
// only consumers <tenant>_r0 .. <tenant>_r<consumers-1>
// ([schema.ResultsConsumerName]) on the results stream, so that is how
// many it may have at once, and no tenant can take another's names.
func tenantImports(name string, consumers int) (services, streams []string) {
	services = []string{
		strings.TrimSuffix(schema.SubjectJobs, ">") + name,
		strings.TrimSuffix(schema.SubjectJobs, ">") + name + ".>",
		schema.SubjectEmbed + "." + name,
		schema.SubjectRerank + "." + name,
		schema.SubjectTokenize + "." + name,
		schema.SubjectInfo + "." + name,
	}
	for k := range consumers {
		c := schema.ResultsConsumerName(name, k)
		services = append(services,
			"$JS.API.CONSUMER.CREATE."+schema.StreamResults+"."+c+"."+schema.DefaultTenantResultsPrefix+"."+name+".>",
			"$JS.API.CONSUMER.DELETE."+schema.StreamResults+"."+c)
	}
	services = append(services,
		"$JS.FC."+schema.StreamResults+".>",
		"$JS.API.DIRECT.GET.OBJ_"+schema.BucketBlobs,
	)
	streams = []string{
		schema.DefaultTenantResultsPrefix + "." + name + ".>",
		schema.SubjectDeliver + "." + name + ".>",
	}
	return services, streams
}

// tenantDeny is what no tenant's user may ever do, whatever its allow list
// says later (deny wins in NATS): forge dead letters, results, usage or
// deliveries, write the fleet's buckets, settle jobs, pull, inspect or
// delete the fleet's consumers, read stored results but through its own
// results consumers, administer streams, use the bare endpoints or the
// shared inbox, or $SRV (micro's discovery answers any reply subject).
// Lines of at most four subjects, as the block prints them.
var tenantDeny = [][]string{
	{schema.SubjectDLQ, schema.SubjectResults, schema.SubjectDeliver + ".>", schema.SubjectUsage},
	{"$KV.>", "$O.>", "$JS.ACK.>"},
	{"$JS.API.CONSUMER.MSG.NEXT.>", "$JS.API.CONSUMER.INFO.>"},
	{"$JS.API.CONSUMER.DELETE.EMBED_JOBS.>", "$JS.API.CONSUMER.DELETE.EMBED_DLQ.>"},
	{"$JS.API.CONSUMER.DELETE.KV_EMBED_ENGINES.>", "$JS.API.CONSUMER.DELETE.OBJ_EMBED_BLOBS.>"},
	{"$JS.API.CONSUMER.LIST.>", "$JS.API.CONSUMER.NAMES.>", "$JS.API.CONSUMER.DURABLE.>"},
	{"$JS.API.CONSUMER.PAUSE.>", "$JS.API.CONSUMER.UNPIN.>", "$JS.API.CONSUMER.LEADER.>"},
	{"$JS.API.CONSUMER.CREATE.EMBED_JOBS.>", "$JS.API.CONSUMER.CREATE.EMBED_DLQ.>"},
	{"$JS.API.CONSUMER.CREATE.OBJ_EMBED_BLOBS.>", "$JS.API.CONSUMER.CREATE.KV_EMBED_ENGINES.>"},
	{"$JS.API.DIRECT.GET.EMBED_RESULTS", "$JS.API.DIRECT.GET.EMBED_RESULTS.>", "$JS.API.STREAM.MSG.GET.>"},
	{"$JS.API.STREAM.INFO.>", "$JS.API.STREAM.LIST", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.CREATE.>"},
	{"$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.PURGE.>"},
	{"$JS.API.STREAM.MSG.DELETE.>", "$JS.API.STREAM.SNAPSHOT.>", "$JS.API.STREAM.RESTORE.>"},
	{"$JS.API.STREAM.PEER.>", "$JS.API.STREAM.LEADER.>", "$SRV.>", "_INBOX.>"},
	{schema.SubjectEmbed, schema.SubjectRerank, schema.SubjectTokenize, schema.SubjectInfo},
}

// tenantImport is one import of a tenant's account from the fleet's:
// remote is the fleet's subject, local the tenant's (the same but for
// the alias of $JS.API.INFO).
type tenantImport struct {
	remote, local string
	service       bool
}

// tenantAccount is what a tenant's account is, in either mode: its imports
// from the fleet's account and its user's permissions. The config block
// and the nsc commands both print it (name is the tenant's name there,
// $TENANT_KEY here), and the JWT test signs it.
type tenantAccount struct {
	imports []tenantImport
	// allowPub is what its user may publish: its service imports;
	// allowSub what it may receive: its inbox and its stream imports.
	allowPub, allowSub []string
	// denyPub is [tenantDeny], in lines.
	denyPub [][]string
}

// newTenantAccount is the account of tenant name with consumers results
// consumers.
//
// An account without JetStream of its own gets the server's answer on
// $JS.API.> ("not enabled"), faster than the fleet answers the consumer
// creation it imports, unless an import covers $JS.API.INFO: the last
// import aliases the info endpoint there.
func newTenantAccount(name string, consumers int) tenantAccount {
	services, streams := tenantImports(name, consumers)
	a := tenantAccount{
		allowPub: services,
		allowSub: append([]string{schema.DefaultTenantInboxPrefix + name + ".>"}, streams...),
		denyPub:  tenantDeny,
	}
	for _, s := range services {
		a.imports = append(a.imports, tenantImport{s, s, true})
	}
	for _, s := range streams {
		a.imports = append(a.imports, tenantImport{s, s, false})
	}
	a.imports = append(a.imports, tenantImport{schema.SubjectInfo + "." + name, "$JS.API.INFO", true})
	return a
}

// tenantAccountBlock is the account of tenant name for a server
// configuration: to go inside the accounts block of accounts.conf (or in a
// file included there: the block is self-contained, since an included
// file sees none of the including file's variables), beside the fleet's
// account. Its user has the producers' permissions ([tenantDeny] and an
// allow list of its own subjects): in its own account they bound nothing
// the imports do not already bound, and they keep refusing, loudly, what
// a tenant may not do.
func tenantAccountBlock(name, fleet string, consumers int) string {
	q := func(s string) string { return `"` + s + `"` }
	var b strings.Builder
	a := newTenantAccount(name, consumers)
	fmt.Fprintf(&b, "  # Tenant %s (jetembed tenant add %s): an account importing the fleet's\n", name, name)
	fmt.Fprintf(&b, "  # subjects of its own name; its user's password is $%s.\n", passwordVariable(name))
	fmt.Fprintf(&b, "  %s: {\n", name)
	fmt.Fprintf(&b, "    users: [\n")
	fmt.Fprintf(&b, "      {user: %s, password: $%s, permissions: {\n", q(name), passwordVariable(name))
	fmt.Fprintf(&b, "        publish: {\n          # What no tenant may ever do, whatever the allow list says (deny wins).\n          deny: [\n")
	for _, line := range a.denyPub {
		qs := make([]string, len(line))
		for i, d := range line {
			qs[i] = q(d)
		}
		fmt.Fprintf(&b, "            %s,\n", strings.Join(qs, ", "))
	}
	fmt.Fprintf(&b, "          ]\n          allow: [\n")
	for _, s := range a.allowPub[:6] {
		fmt.Fprintf(&b, "            %s,\n", q(s))
	}
	fmt.Fprintf(&b, "            # Its results consumers, %d at most (push, filtered on its results,\n", consumers)
	fmt.Fprintf(&b, "            # delivering to %s.%s.<id>), their flow control; blobs by direct get.\n", schema.SubjectDeliver, name)
	for _, s := range a.allowPub[6:] {
		fmt.Fprintf(&b, "            %s,\n", q(s))
	}
	fmt.Fprintf(&b, "          ]\n        }\n")
	qs := make([]string, len(a.allowSub))
	for i, s := range a.allowSub {
		qs[i] = q(s)
	}
	fmt.Fprintf(&b, "        subscribe: {\n          allow: [%s]\n        }\n", strings.Join(qs, ", "))
	fmt.Fprintf(&b, "      }}\n    ]\n    imports: [\n")
	for _, im := range a.imports {
		kind := "stream"
		if im.service {
			kind = "service"
		}
		if im.local == im.remote {
			fmt.Fprintf(&b, "      {%s: {account: %s, subject: %s}}\n", kind, fleet, q(im.remote))
			continue
		}
		// The one alias: $JS.API.INFO (see newTenantAccount).
		fmt.Fprintf(&b, "      # No JetStream of its own: the server answers an account without it on\n")
		fmt.Fprintf(&b, "      # $JS.API.> (\"not enabled\"), faster than EMBED answers the consumer\n")
		fmt.Fprintf(&b, "      # creation imported above, unless an import covers $JS.API.INFO.\n")
		fmt.Fprintf(&b, "      {%s: {account: %s, subject: %s}, to: %s}\n", kind, fleet, q(im.remote), q(im.local))
	}
	fmt.Fprintf(&b, "    ]\n  }\n")
	return b.String()
}

// fleetExports are the exports of the fleet's account that tenants import:
// subject, account_token_position (0: none, open to every tenant), the
// response type of a service (stream: every member answers) and how long
// the server keeps the routed reply of a request (empty: its default, 2
// minutes). As deploy/nats/accounts.conf exports them.
var fleetExports = []struct {
	subject   string
	service   bool
	position  int
	stream    bool
	threshold string
}{
	{"embed.jobs.*", true, 3, false, ""},
	{"embed.jobs.*.>", true, 3, false, ""},
	// Requests: their answers come when the fleet has room (a deadline of
	// up to 5 minutes).
	{schema.SubjectEmbed + ".*", true, 4, false, "6m"},
	{schema.SubjectRerank + ".*", true, 4, false, "6m"},
	{schema.SubjectTokenize + ".*", true, 4, false, "6m"},
	{schema.SubjectInfo + ".*", true, 4, true, ""},
	{"$JS.API.CONSUMER.CREATE." + schema.StreamResults + ".*." + schema.DefaultTenantResultsPrefix + ".*.>", true, 9, false, ""},
	{"$JS.API.CONSUMER.DELETE." + schema.StreamResults + ".*", true, 0, false, ""},
	{"$JS.FC." + schema.StreamResults + ".>", true, 0, false, ""},
	{"$JS.API.DIRECT.GET.OBJ_" + schema.BucketBlobs, true, 0, false, ""},
	{schema.DefaultTenantResultsPrefix + ".*.>", false, 3, false, ""},
	{schema.SubjectDeliver + ".*.>", false, 3, false, ""},
}

// tenantKeyVariable is the shell variable of the tenant account's public
// key in [tenantNscCommands], where the config block has its name.
const tenantKeyVariable = "$TENANT_KEY"

// tenantNscCommands are the nsc commands that add tenant name as an account
// of the operator nsc holds (decentralized JWT auth: pushed to the
// resolver, no server restart). The server binds a tenant token to the
// importing account's public key there, not its name: the tenant's
// subjects carry the key, its tools run with --tenant <key>, and the last
// command records key -> name in tenants.tsv for whoever reports per
// tenant (jetembed usage --tenant-names; quotas). The account is [newTenantAccount] of the key;
// its user has the allow lists but not the deny list of the config block
// (nothing there is allowed anyway).
func tenantNscCommands(name, fleet string, consumers int) string {
	// In double quotes the shell expands $JS and $O: only the key is a
	// variable.
	dq := func(s string) string {
		return `"` + strings.ReplaceAll(strings.ReplaceAll(s, "$", `\$`), `\`+tenantKeyVariable, tenantKeyVariable) + `"`
	}
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n# Tenant %s as an account of the operator (nsc, JWT mode): jetembed tenant add %s --jwt\nset -eu\n", name, name)
	fmt.Fprintf(&b, "FLEET_KEY=$(nsc describe account %s --field sub | tr -d '\"')\n", fleet)
	fmt.Fprintf(&b, "# Once per operator, the fleet account's exports (nsc refuses a second copy: skip them then):\n")
	for _, e := range fleetExports {
		kind := ""
		if e.service {
			kind = " --service"
		}
		pos := ""
		if e.position > 0 {
			pos = fmt.Sprintf(" --account-token-position %d", e.position)
		}
		if e.stream {
			kind += " --response-type Stream"
		}
		if e.threshold != "" {
			kind += " --response-threshold " + e.threshold
		}
		fmt.Fprintf(&b, "#   nsc add export --account %s%s --subject '%s'%s\n", fleet, kind, e.subject, pos)
	}
	fmt.Fprintf(&b, "nsc add account --name %s\n", name)
	fmt.Fprintf(&b, "TENANT_KEY=$(nsc describe account %s --field sub | tr -d '\"')\n", name)
	a := newTenantAccount(tenantKeyVariable, consumers)
	nsvc, nstr := 0, 0
	for _, im := range a.imports {
		kind, id := "", ""
		if im.service {
			kind, id = " --service", fmt.Sprintf("svc%d", nsvc)
			nsvc++
		} else {
			id = fmt.Sprintf("str%d", nstr)
			nstr++
		}
		fmt.Fprintf(&b, "nsc add import --account %s --src-account \"$FLEET_KEY\"%s --name %s --remote-subject %s --local-subject %s\n", name, kind, id, dq(im.remote), dq(im.local))
	}
	fmt.Fprintf(&b, "nsc add user --account %s --name %s", name, name)
	for _, s := range a.allowPub {
		fmt.Fprintf(&b, " \\\n  --allow-pub %s", dq(s))
	}
	b.WriteString(" \\\n ")
	for _, s := range a.allowSub {
		fmt.Fprintf(&b, " --allow-sub %s", dq(s))
	}
	fmt.Fprintf(&b, "\nnsc push --account %s\n", name)
	fmt.Fprintf(&b, "# The server names this tenant by its key: its tools run with --tenant \"$TENANT_KEY\".\n")
	fmt.Fprintf(&b, "printf '%%s\\t%%s\\n' \"$TENANT_KEY\" %s >> tenants.tsv\n", name)
	return b.String()
}
