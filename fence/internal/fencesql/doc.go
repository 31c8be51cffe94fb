// Package fencesql holds what the SQL fence stores, fence/postgres and
// fence/sqlite, share: the rules their table, column and run names and
// their fencing tokens must follow, and Entry, the fence that their List
// methods return (and fence.Store's).
//
// Its errors are *baton.OptionError, matching baton.ErrInvalidOption, with
// the same messages in both stores; a store only says what may qualify a
// table name there.
package fencesql
