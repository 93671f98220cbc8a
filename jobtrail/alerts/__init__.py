"""Subscriptions and alert delivery at the edges: storage, secrets, the decide pass and the
delivery worker (the pure parts are in `processors.notify`)."""
