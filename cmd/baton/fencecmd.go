package main

import (
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence"
)

func newFence(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fence",
		Short: "Create or show fence tables in a database",
		Long: `A fence store is a table, in the database the job writes to, that keeps the
newest fencing token per resource and refuses older ones, plus a table of
runs marked done (baton run --once). baton run --fence needs the tables to
exist; 'baton fence init' creates them.`,
		Args: cobra.NoArgs, // a mistyped subcommand is a usage error, not help and exit 0
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var store string
	init := &cobra.Command{
		Use:     "init --store URL",
		Short:   "Create the fence tables if they are missing",
		Example: "  baton fence init --store postgres://app@db:5432/billing\n  baton fence init --store sqlite:/var/lib/app/ledger.db",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkStoreURL("--store", store); err != nil {
				return err
			}
			s, err := fence.Open(cmd.Context(), store, fence.WithCreate(true))
			if err != nil {
				return interrupted(cmd.Context(), err, "while opening the fence store "+baton.Redact(store))
			}
			defer closeStore(cmd, g, store, s)
			fmt.Fprintf(cmd.OutOrStdout(), "fence tables ready in %s\n", baton.Redact(store))
			return nil
		},
	}
	show := &cobra.Command{
		Use:     "show --store URL [RESOURCE...]",
		Short:   "Show the newest token each fence has accepted",
		Example: "  baton fence show --store sqlite:ledger.db\n  baton fence show --store postgres://app@db/billing invoices",
		RunE: func(cmd *cobra.Command, resources []string) error {
			if err := checkStoreURL("--store", store); err != nil {
				return err
			}
			for _, r := range resources { // a fence's resource is a lock name
				if err := baton.ValidateName(r); err != nil {
					return err
				}
			}
			s, err := fence.Open(cmd.Context(), store)
			if err != nil {
				return interrupted(cmd.Context(), err, "while opening the fence store "+baton.Redact(store))
			}
			defer closeStore(cmd, g, store, s)
			entries, err := s.List(cmd.Context())
			if err != nil {
				return interrupted(cmd.Context(), err, "while reading the fences")
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "RESOURCE\tNEWEST TOKEN\tRAISED")
			all := len(resources) == 0
			byName := map[string]fence.Entry{}
			for _, e := range entries {
				byName[e.Resource] = e
				if all {
					resources = append(resources, e.Resource) // every fence, in the store's order
				}
			}
			shown := map[string]bool{}
			for _, r := range resources { // in the order given, each once
				if shown[r] {
					continue
				}
				shown[r] = true
				if e, ok := byName[r]; ok {
					fmt.Fprintf(tw, "%s\t%d\t%s\n", e.Resource, e.Token, e.UpdatedAt.Local().Format(time.DateTime))
				} else {
					fmt.Fprintf(tw, "%s\t0\tnever\n", r)
				}
			}
			return tw.Flush()
		},
	}
	for _, c := range []*cobra.Command{init, show} {
		c.Flags().StringVar(&store, "store", "", "fence store URL: postgres://... or sqlite:PATH")
		_ = c.MarkFlagRequired("store")
	}
	cmd.AddCommand(init, show)
	return cmd
}

// checkStoreURL turns a fence store URL without a scheme (a bare path, or
// nothing), which fence.Open would answer with the lock services' example
// etcd://, into a usage error that names the fence stores' URLs, and one
// with a scheme no fence store has into a usage error too; flag is the
// flag that gave it.
func checkStoreURL(flag, rawURL string) error {
	if strings.TrimSpace(rawURL) == "" {
		return usageError("%s is empty: pass %s", flag, storeURLs)
	}
	if u, err := url.Parse(rawURL); err == nil && u.Scheme == "" {
		shown := baton.Redact(rawURL)
		if shown != baton.Printable(rawURL) { // it holds a password: not a path
			return usageError("%s %s has no scheme: write postgres://user:password@host:port/database, or sqlite:PATH for a SQLite file", flag, shown)
		}
		return usageError("%s %s has no scheme: write sqlite:%s for a SQLite file, or postgres://user@host:port/database", flag, shown, shown)
	}
	// A scheme no fence store has is said before any lock service is
	// asked: it is a typo, whether the service answers or not.
	if err := fence.CheckURL(rawURL); err != nil {
		return usageError("%s: %v", flag, err)
	}
	return nil
}
