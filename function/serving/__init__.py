"""What a serving pod gets: env injection and the flash loader's settings."""
