package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton"
)

func newRelease(g *globals) *cobra.Command {
	var backend string
	var force bool
	cmd := &cobra.Command{
		Use:   "release --force NAME",
		Short: "Free a lock held by someone else (an operator's last resort)",
		Long: `release --force frees the lock NAME whoever holds it, and prints who held it
and its token (on fenced backends). The holder is told its lease is lost (baton run stops its
command), and the next waiter gets the lock. If the holder is frozen rather
than dead, it may still write when it wakes: only a fence stops that, once
the next holder has raised it. A lock no one holds is left as it is (exit 0).

Exit codes: 0 freed, or not held; 2 bad input, or --force missing; 69 the
lock service is unreachable, or did not answer (the lock may have been freed
all the same: look with baton status before forcing again); 130 interrupted
(the same holds); 1 any other failure, such as a lock that changed hands
between the look and the delete (nothing freed).`,
		Example: "  baton release --force invoices",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := baton.ValidateName(name); err != nil {
				return err
			}
			if !force {
				return usageError("release frees a lock someone else holds; pass --force to do it: baton release --force %s", name)
			}
			locker, err := openLooking(cmd, g.logger(cmd.ErrOrStderr()), backend)
			if err != nil {
				return err
			}
			defer closeBackend(cmd, g, backend, locker)
			fr, ok := locker.Backend().(baton.ForceReleaser)
			if !ok {
				return fmt.Errorf("%s cannot free another holder's lock", baton.Redact(backend))
			}
			info, err := fr.ForceRelease(cmd.Context(), name)
			if errors.Is(err, baton.ErrNotAcquired) {
				fmt.Fprintf(cmd.OutOrStdout(), "%s is not held: nothing to release\n", name)
				return nil
			}
			const mayBeFreed = "the lock may have been freed all the same: look with baton status before forcing again, which would free the next holder's lock"
			if err != nil && cmd.Context().Err() != nil {
				return &exitError{code: exitInterrupted, msg: fmt.Sprintf("interrupted while freeing %s; %s", name, mayBeFreed)}
			}
			if errors.Is(err, baton.ErrUnavailable) {
				return fmt.Errorf("%w; %s", err, mayBeFreed)
			}
			if err != nil {
				return err
			}
			if _, fenced := locker.Fenced(); !fenced { // Redis, Redlock: no token to show
				fmt.Fprintf(cmd.OutOrStdout(), "released %s: it was held by %s (key %s)\n", name, baton.Printable(info.Holder), info.Key)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "released %s: it was held by %s (token %d, key %s)\n", name, baton.Printable(info.Holder), info.Token, info.Key)
			return nil
		},
	}
	backendFlag(cmd.Flags(), &backend, "lock service URL (env BATON_BACKEND)")
	cmd.Flags().BoolVar(&force, "force", false, "really free the lock")
	return cmd
}
