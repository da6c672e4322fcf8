// Package toolsub serves tool subscriptions (seed
// rap-subscription-events.md; docs/PROTOCOL.md, "Tool subscriptions")
// as an add-on of the bus: an agent records one with
// toolSubscriptions.start and gets a callback, an unguessable id served
// at /v1/callbacks/{id} and as the topic callback:{id}; each event a
// tool posts there is checked against the subscription and published
// on its topic as a message from the agent, so that a hibernated agent
// is woken by the spawner's fallback subscription as by any message.
//
// The Store is the record of the active subscriptions; the add-on keeps
// an index of it by thread, and each subscription's rate bucket and
// order. It uses the bus's seams only: HandleMethod for the three
// methods, Handle for the callbacks, HandleCallbacks for the callback
// topics, Publish for the events and PublishBestEffort for a cancel's
// notice to the tool.
//
// Locks: a subscription's order (liveSub.order) is held while one of its
// events is checked, published and, when final, removed from the store,
// so that its events go through one at a time; it is taken before any
// lock of the bus, and before subscriptions.mu, which is taken alone.
package toolsub
