"""In-network aggregation (seed draft 002: VAT bitmaps, BIER result dissemination): pure logic, no I/O."""
