"""Ray-free pieces of the serving endpoint: request validation and image decoding, response bodies."""
