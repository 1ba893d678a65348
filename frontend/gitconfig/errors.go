package gitconfig

import "errors"

// ErrSyntax is returned (wrapped, with a line number) by Parse and Sanitize for input git
// itself would reject as a bad config file.
var ErrSyntax = errors.New("bad git config syntax")
