"""Node agents that run inside lab containers: thin asyncio shells around aidcnet's pure logic."""
