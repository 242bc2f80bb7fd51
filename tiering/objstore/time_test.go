package objstore_test

import "time"

var timeLongAgo = time.Now().Add(-48 * time.Hour)
