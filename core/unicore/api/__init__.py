"""core/unicore/api"""
