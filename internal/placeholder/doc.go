// Package placeholder makes the stand-ins that the guest holds instead of real
// credentials: random values of the real value's shape (its known prefix, length and
// character classes; for a JWT its header and claims). brood makes them for the
// developer's credentials at the start of a session; the egress process makes them for
// the new tokens of an OAuth refresh.
//
// Privilege: none; pure functions over crypto/rand, linked into brood and into the
// egress process.
package placeholder
