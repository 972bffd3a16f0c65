"""What a user asks for: a session (record, replay), a matrix, an update, a minimize, detection."""
