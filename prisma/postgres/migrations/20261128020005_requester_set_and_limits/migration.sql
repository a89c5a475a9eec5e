-- AlterTable
ALTER TABLE "Memory" ADD COLUMN     "contributors" TEXT;

-- CreateTable
CREATE TABLE "LimitUse" (
    "scope" TEXT NOT NULL,
    "windowStart" TIMESTAMP(3) NOT NULL,
    "slot" INTEGER NOT NULL,
    "key" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "LimitUse_pkey" PRIMARY KEY ("scope","windowStart","slot")
);

-- CreateTable
CREATE TABLE "SpendWindow" (
    "scope" TEXT NOT NULL,
    "windowStart" TIMESTAMP(3) NOT NULL,
    "spent" INTEGER NOT NULL DEFAULT 0,

    CONSTRAINT "SpendWindow_pkey" PRIMARY KEY ("scope","windowStart")
);

-- CreateIndex
CREATE UNIQUE INDEX "LimitUse_scope_key_key" ON "LimitUse"("scope", "key");
