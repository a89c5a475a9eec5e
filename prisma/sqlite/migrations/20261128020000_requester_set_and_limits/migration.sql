-- AlterTable
ALTER TABLE "Memory" ADD COLUMN "contributors" TEXT;

-- CreateTable
CREATE TABLE "LimitUse" (
    "scope" TEXT NOT NULL,
    "windowStart" DATETIME NOT NULL,
    "slot" INTEGER NOT NULL,
    "key" TEXT NOT NULL,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,

    PRIMARY KEY ("scope", "windowStart", "slot")
);

-- CreateIndex
CREATE UNIQUE INDEX "LimitUse_scope_key_key" ON "LimitUse"("scope", "key");

-- CreateTable
CREATE TABLE "SpendWindow" (
    "scope" TEXT NOT NULL,
    "windowStart" DATETIME NOT NULL,
    "spent" INTEGER NOT NULL DEFAULT 0,

    PRIMARY KEY ("scope", "windowStart")
);
