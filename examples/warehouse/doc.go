// Package warehouse is the guide's application: the nightly invoice job that
// bills each client once a month, written the safe way. It takes a fenced
// lease, raises the fence as its very first step, then writes every invoice
// in a transaction that checks the fence, with the client and month as the
// primary key so that a redo by the next holder cannot bill twice.
//
// The ledger (the invoices table and its fence) lives in PostgreSQL or in an
// SQLite file. `baton demo` and the frozen-holder tests run this job in
// separate processes, freeze one with SIGSTOP and check the database.
package warehouse
