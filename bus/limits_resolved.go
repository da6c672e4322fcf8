package bus

// Resolved returns l with every zero field replaced by the default the
// bus applies (MaxConnections 0 is 10000, HandshakeTimeout 0 is 10s, ...),
// so that what an operator is shown is what is in force. Negative
// fields ("no limit") are kept.
func (l Limits) Resolved() Limits {
	l.setDefaults()
	return l
}
