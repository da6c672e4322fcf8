package spawner

// SetHandlers bounds the handlers the connection of a spawner made with
// o runs at once, but for its client events' (Options.handlers), so that
// a test can fill them with a few conversations.
func SetHandlers(o *Options, n int) { o.handlers = n }
