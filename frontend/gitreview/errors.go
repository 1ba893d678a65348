package gitreview

import "errors"

// ErrRefExists is returned (wrapped, with the ref) by Apply when the branch it would
// create already exists in W.
var ErrRefExists = errors.New("ref already exists")

// ErrNotAppliable is returned (wrapped) by Apply for a ref the review refused.
var ErrNotAppliable = errors.New("ref refused by the review")
