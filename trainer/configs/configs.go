// Package configs holds the training schedules documented for
// `segpipe train --config` (the JSON files beside this one). The
// quickstart's is embedded, so the command trains with the very file a
// user reads and can pass to train.
package configs

import _ "embed"

// Quickstart is quickstart.json: a schedule that learns from random
// weights in minutes on the quickstart's easy synthetic set.
//
//go:embed quickstart.json
var Quickstart string
