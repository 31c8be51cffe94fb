package redlock

// UnlockScriptHash is the SHA1 that an undo or a release names in EVALSHA,
// for tests that pick that request out on the wire.
var UnlockScriptHash = unlockScript.Hash()
