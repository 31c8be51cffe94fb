package redis

// AcquireScriptHash is the SHA1 an attempt names in EVALSHA, for tests
// that pick that request out on the wire.
var AcquireScriptHash = acquireScript.Hash()
