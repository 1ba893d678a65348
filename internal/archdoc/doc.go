// Package archdoc holds brood's repository-wide documentation tests: docs/ARCHITECTURE.md
// lists exactly the packages that exist, each with its doc comment and its imports (the
// list between the "packages" markers is generated: scripts/archdoc.sh rewrites it), and
// every Go name it mentions is still declared; every package has a doc comment that names
// its privilege level; and no file in the repository points a reader at a document, issue
// or tracker outside it.
//
// Privilege: none; tests only. It has no non-test code.
package archdoc
