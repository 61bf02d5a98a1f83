"""Model providers behind one interface: scripted, bedrock, openai-compatible."""
