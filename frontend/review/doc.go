// Package review is the interactive step of brood's review gate: it shows each change the
// agent made in the snapshot S (a header with kind, escaped path, risk flag and reason, then a
// colored unified diff, or sizes and hashes for binary files), lets the developer accept,
// reject, skip or hunk-select it, offers a three-way merge for conflicts (W changed since the
// snapshot as well), and hands the accepted items to the flush.
//
// Everything it prints that came from the workspace or the snapshot (names, diff lines,
// symlink targets, reasons) goes through EscapeName or EscapeLine first, so that no byte the
// agent chose can drive the terminal (ESC, CSI, OSC 52 clipboard writes, CR overwrites, BEL).
//
// The pieces are usable on their own: Hunks/Select (hunk model and exact hunk selection),
// Merge3 (diff3 on go-udiff line edits), Interactive (display and the interactive loop over a
// key reader; Terminal puts a TTY in raw mode for it), Auto (the non-interactive --all /
// PATH / --reject-all choices), Accepted (decisions to flush items) and WriteRecord (what
// was decided, kept in the session directory).
//
// Privilege: none; it runs in brood as the developer, on the developer's terminal.
package review
